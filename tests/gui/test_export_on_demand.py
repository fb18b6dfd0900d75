"""The window's Export… of a result whose maps are computed on demand (attentions None): the same contents as the
command line's; above the export budget, the current head's arrays and image, and the grid from the thumbnails."""
import json

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from helpers import TEXT, WAIT_MS, bundle, exporter_on  # noqa: E402


@pytest.fixture(scope="module")
def on_demand(tiny_model):
    from analysis.measures.measured import run_measured
    from analysis.run import memory

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(memory.KEEP_MAPS_ENV, "0")
        result = run_measured(tiny_model, TEXT, bos=True)
    assert result.attentions is None and result.thumbnails is not None
    return result


def exported(qtbot, worker, settings, tmp_path, result, what="everything"):
    from analysis.measures.head_scores import all_scores
    exporter, failed = exporter_on(qtbot, worker, settings, bundle(result, all_scores(result)), 2, 1)
    with qtbot.waitSignal(exporter.finished, timeout=WAIT_MS) as blocker:
        assert exporter.start(what, tmp_path / what)
    assert failed == []
    return tmp_path / what, sorted(p.relative_to(tmp_path / what).as_posix() for p in blocker.args[0])


def test_everything_of_an_on_demand_result_within_the_budget_is_every_head(qtbot, loaded_worker, settings, tmp_path,
                                                                          on_demand, tiny_result):
    out, files = exported(qtbot, loaded_worker, settings, tmp_path, on_demand)
    images = [f for f in files if f.startswith("heads/") and f.endswith(".png")]
    assert "grid.png" in files and len(images) == 12
    assert {f for f in files if f.endswith(".json") and f != "summary.json" and f != "parity.json"} == {
        "grid.json", *(f.replace(".png", ".json") for f in images)}  # each image's options beside it
    with np.load(out / "attention.npz") as data:
        assert data.files == ["attentions", "value_norms", "rollout", "tokens", "token_ids"]
        np.testing.assert_allclose(data["attentions"], tiny_result.attentions, atol=1e-5, rtol=0)


def test_above_the_budget_everything_holds_the_current_head(qtbot, loaded_worker, settings, tmp_path, on_demand,
                                                            monkeypatch):
    from analysis.export import layout

    monkeypatch.setattr(layout, "DEFAULT_MAX_EXPORT_MB", 0)
    out, files = exported(qtbot, loaded_worker, settings, tmp_path, on_demand)
    assert [f for f in files if f.endswith(".png")] == ["grid.png", "heads/L2H1.png"]
    with np.load(out / "attention.npz") as data:
        assert data.files == ["head_maps", "head_value_norms", "head_index", "layer_rollout", "layer_index", "tokens",
                              "token_ids"]
        assert data["head_index"].tolist() == [[2, 1]]
        np.testing.assert_array_equal(data["head_maps"][0], on_demand.head_map(2, 1))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["export"]["left_out"].keys() == {"attentions", "value_norms", "rollout"}
