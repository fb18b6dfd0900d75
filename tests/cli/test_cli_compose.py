"""``attnscope compose``: the JSON holds every score as the core computes them, and the strongest pairs in order."""
import json

import numpy as np
import pytest

from analysis.measures.composition import model_composition
from helpers import run_main as run


@pytest.mark.slow
def test_compose_writes_every_score(tiny_model_dir, tiny_model, tmp_path, capsys):
    target = tmp_path / "c.json"
    code, stdout, err = run(capsys, "compose", "--model", tiny_model_dir, "--top", "3", "--json", target)
    assert code == 0, err
    data = json.loads(target.read_text(encoding="utf-8"))
    direct = model_composition(tiny_model)
    L, H = tiny_model.n_layer, tiny_model.n_head
    for kind in "qkv":
        got = np.array([[[[np.nan if x is None else x for x in r] for r in m] for m in a] for a in data[kind]])
        assert got.shape == (L, H, L, H)
        np.testing.assert_allclose(got, getattr(direct, kind), atol=1e-12)
        scores = [p["corrected"] for p in data[f"{kind}_strongest"]]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert json.loads(stdout)["baseline"] == pytest.approx(direct.baseline)
