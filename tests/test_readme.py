"""The README's Python block runs as written, on the bundled model, and gives what it says."""
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_python_block_runs_and_its_numbers_are_the_apis():
    from analysis.measures.head_scores import previous_token

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1
    space: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), space)
    loaded, result, scores, patched = (space[k] for k in ("loaded", "result", "scores", "patched"))
    L, H = loaded.n_layer, loaded.n_head
    assert scores["previous_token"].shape == (L, H) and patched.effect.shape == (L, H)
    if result.attentions is not None:  # an independent computation of one score from the maps
        np.testing.assert_allclose(scores["previous_token"], previous_token(result.attentions), atol=1e-9)
    assert np.isfinite(patched.effect).all()
