"""Every command on every family: grouped-query attention (llama), fused per-head QKV with a parallel
residual (NeoX), an encoder (BERT)."""
import csv
import json

import numpy as np
import pytest

from analysis.measures import ablation, lenses, scan, scan_inputs, scan_speed
from helpers import one_error_line, run_main as run

TEXT = "The cat sat on the mat because it was tired. The cat sat on the mat."


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory):
    from analysis.model.synthetic import save_random_family

    root = tmp_path_factory.mktemp("lens-families")
    return {t: save_random_family(root / t, t, seed=5) for t in ("llama", "gpt_neox", "bert")}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["llama", "gpt_neox", "bert"])
def test_export_and_scan_work_for_every_family(model_type, family_folders, tmp_path, capsys):
    """Grouped-query attention (llama), fused per-head QKV with a parallel residual (NeoX), an encoder (BERT)."""
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model

    folder = family_folders[model_type]
    code, _, err = run(capsys, "export", "--model", folder, "--text", TEXT, "--out", tmp_path / "x",
                       "--no-head-images")
    assert code == 0, err
    loaded = load_model(str(folder), device="cpu")
    result = run_text(loaded, TEXT)
    with np.load(tmp_path / "x" / "attention.npz") as data:
        np.testing.assert_allclose(data["value_norms"], lenses.value_norms(loaded, result).value_norms, rtol=1e-5,
                                   atol=1e-7)
        np.testing.assert_allclose(data["rollout"], lenses.rollout(result.attentions), rtol=1e-5, atol=1e-7)
    code, _, err = run(capsys, "scan", "--model", folder, "--out", tmp_path / "s", "--max-texts", "6", "--batch", "3")
    assert code == 0, err
    alone = scan.scan_texts(loaded, scan_inputs.read_texts(scan_inputs.SAMPLE_TEXTS)[:6], batch_size=1)
    assert scan_speed.max_abs_diff(alone, scan.scan_texts(loaded, scan_inputs.read_texts(scan_inputs.SAMPLE_TEXTS)[:6], batch_size=3)) < 1e-5
    with open(tmp_path / "s" / "scores_mean.csv", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    encoder = model_type == "bert"
    assert (rows[0][header.index("induction")] == "n/a") is encoder  # the induction scores are for decoders only
    code, stdout, err = run(capsys, "ablate", "--model", folder, "--text", TEXT, "--heads", "1.1")
    if encoder:
        assert code == 2 and "encoder" in one_error_line(err) and stdout == ""
    else:
        assert code == 0, err
        direct = ablation.ablate(loaded, TEXT, [(1, 1)])
        assert json.loads(stdout)["ablated"]["loss"] == pytest.approx(direct.ablated.loss, abs=1e-9)
