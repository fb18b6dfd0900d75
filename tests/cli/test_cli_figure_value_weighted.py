"""``main.py figure --value-weighted``: the map drawn is w'[q, k] = A[q, k]·‖f_h(x_k)‖ / Σ_k' A[q, k']·‖f_h(x_k')‖,
checked against the model's own weights read here with transformers and numpy; its title and colour bar say so, its
options file says ``weighting: value`` and ``--from`` draws it again byte for byte."""
import json

import numpy as np
import pytest

from helpers import run_main as run

TEXT = "The server rejected the request because it was overloaded. The server"


def independent_value_weighted(model_dir, token_ids, layer: int, head: int, hide_first: bool = False) -> np.ndarray:
    """The value-weighted map of one head from the GPT-2 checkpoint itself (transformers' forward pass for A and
    the block input, then numpy): f_h(x_k) = (ln_1(x_k) W_V^h + b_V^h) W_O^h, w' = A·‖f_h‖ rows normalised."""
    import torch
    from transformers import GPT2Model

    model = GPT2Model.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.tensor([list(token_ids)]), output_attentions=True, output_hidden_states=True)
        block = model.h[layer]
        x = block.ln_1(out.hidden_states[layer])[0].numpy().astype(np.float64)  # (n, d): what entered attention
    a = out.attentions[layer][0, head].numpy().astype(np.float64)  # (n, n)
    d = x.shape[1]
    dk = d // model.config.n_head
    w_qkv = block.attn.c_attn.weight.detach().numpy().astype(np.float64)  # (d, 3d): x @ W (Conv1D)
    b_qkv = block.attn.c_attn.bias.detach().numpy().astype(np.float64)
    w_o = block.attn.c_proj.weight.detach().numpy().astype(np.float64)  # (d, d)
    cols = slice(2 * d + head * dk, 2 * d + (head + 1) * dk)  # the head's value columns
    f = (x @ w_qkv[:, cols] + b_qkv[cols]) @ w_o[head * dk:(head + 1) * dk]  # (n, d)
    n = a * np.linalg.norm(f, axis=1)[None, :]
    if hide_first:
        n[:, 0] = 0.0
    total = n.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):  # row 0 with its only key hidden: nothing to show (NaN)
        shares = np.where(total > 0, n / total, np.nan if hide_first else 0.0)
    if hide_first:
        shares[:, 0] = np.nan
    return shares


@pytest.mark.parametrize("hide_first", [False, True])
def test_the_value_weighted_map_is_the_formula_on_the_models_own_weights(tiny_model_dir, hide_first):
    from analysis.export.figure_options import FigureOptions, figure_key_norms
    from analysis.measures.measured import run_measured
    from analysis.model.loading import load_model
    from gui.plots.figure_parts import figure_map

    loaded = load_model(str(tiny_model_dir), device="cpu")
    result = run_measured(loaded, TEXT, bos=True)
    norms = figure_key_norms(loaded, result)
    options = FigureOptions(heads=((1, 2),), weighting="value", hide_first=hide_first)
    for layer, head in ((1, 2), (2, 0)):
        drawn = figure_map(result, layer, head, options, norms)
        expected = independent_value_weighted(tiny_model_dir, result.token_ids, layer, head, hide_first)
        np.testing.assert_allclose(drawn, expected, rtol=0, atol=2e-5, equal_nan=True)
        weights = figure_map(result, layer, head, options.with_(weighting="attention"), norms)
        assert np.nanmax(np.abs(drawn - weights)) > 1e-3  # the weighting changed the map: the test can fail
    with pytest.raises(Exception, match="value norms"):
        figure_map(result, 1, 2, options, None)


def svg_texts(path) -> list[str]:
    import html
    import re

    return [html.unescape(t).strip() for t in re.findall(r">([^<>]+)</text>", path.read_text())]


@pytest.mark.parametrize("head", [["--head", "L1H2"], ["--head", "L1H2,L2H0"], []], ids=["head", "panels", "grid"])
def test_a_value_weighted_figure_says_so_and_is_drawn_again_from_its_options(tiny_model_dir, tmp_path, capsys, head):
    base = ["figure", "--model", tiny_model_dir, "--text", TEXT, "--bos", *head]
    code, _, err = run(capsys, *base, "--value-weighted", "--out", tmp_path / "v.svg")
    assert code == 0, err
    texts = svg_texts(tmp_path / "v.svg")
    assert any("value-weighted" in t for t in texts), texts  # the title says so
    assert "share of row N" in texts  # and the colour bar
    code, _, err = run(capsys, *base, "--value-weighted", "--out", tmp_path / "v.png", "--width-px", "600")
    assert code == 0, err
    assert json.loads((tmp_path / "v.json").read_text())["options"]["weighting"] == "value"
    code, _, err = run(capsys, "figure", "--from", tmp_path / "v.json", "--out", tmp_path / "again.png")
    assert code == 0, err
    assert (tmp_path / "again.png").read_bytes() == (tmp_path / "v.png").read_bytes()
    code, _, err = run(capsys, *base, "--out", tmp_path / "a.png", "--width-px", "600")
    assert code == 0, err
    assert (tmp_path / "a.png").read_bytes() != (tmp_path / "v.png").read_bytes()


def test_an_unknown_weighting_in_an_options_file_is_one_sentence(tmp_path, capsys):
    (tmp_path / "x.json").write_text(json.dumps({"kind": "attnscope-figure", "options": {"weighting": "values"}}))
    code, _, err = run(capsys, "figure", "--from", tmp_path / "x.json", "--out", tmp_path / "x.png")
    assert code == 2 and "Unknown weighting 'values'" in err and "Traceback" not in err
