"""Head ablation against an independent computation: a forward pre-hook on c_proj that edits the
ablated head's slice of the merged head outputs."""
import json
import threading

import numpy as np
import pytest

from analysis.measures import ablation
from analysis.errors import InputError

TEXT = "The cat sat on the mat because it was tired. The cat sat on the mat."


def reference_loss(loaded, text, heads, mode, bos=True):
    """Loss and last-position probabilities with head slices of c_proj's input zeroed / position-averaged."""
    import torch

    from analysis.run.tokenize import tokenize

    ids, _, _ = tokenize(loaded, text, bos)
    dk = loaded.d_model // loaded.n_head
    by_layer = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def pre_hook(layer_heads):
        def hook(module, args):
            merged = args[0].clone()  # (1, n, d): the heads side by side, before W_O
            for h in layer_heads:
                part = merged[..., h * dk : (h + 1) * dk]
                merged[..., h * dk : (h + 1) * dk] = 0 if mode == "zero" else part.mean(dim=1, keepdim=True)
            return (merged,)

        return hook

    handles = [loaded.model.transformer.h[l].attn.c_proj.register_forward_pre_hook(pre_hook(hs))
               for l, hs in by_layer.items()]
    try:
        with torch.no_grad():
            logits = loaded.model(input_ids=torch.tensor([ids])).logits[0].double()
    finally:
        for h in handles:
            h.remove()
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item()
    probs = torch.softmax(logits[-1, : len(loaded.tokenizer)], dim=-1).numpy()
    return loss, probs


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_ablation_matches_a_pre_hook_on_the_output_projection(tiny_model, mode):
    heads = [(0, 1), (2, 3), (2, 0)]
    result = ablation.ablate(tiny_model, TEXT, heads, mode=mode, bos=True)
    base_loss, base_probs = reference_loss(tiny_model, TEXT, [], mode)
    loss, probs = reference_loss(tiny_model, TEXT, heads, mode)
    assert result.baseline.loss == pytest.approx(base_loss, abs=1e-5)
    assert result.ablated.loss == pytest.approx(loss, abs=1e-5)
    assert abs(loss - base_loss) > 1e-4  # the ablation really changed something
    top_ids = np.argsort(-probs)[:5]
    np.testing.assert_allclose([p for _, p in result.ablated.top], probs[top_ids], atol=1e-5)
    assert len(result.baseline.top) == 5
    np.testing.assert_allclose([p for _, p in result.baseline.top], np.sort(base_probs)[::-1][:5], atol=1e-5)


def test_result_is_json_with_the_documented_keys(tiny_model):
    result = ablation.ablate(tiny_model, TEXT, [(1, 2)], mode="mean", bos=True)
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data) == {"mode", "heads", "head_names", "n_tokens", "truncated", "baseline", "ablated"}
    assert data["mode"] == "mean" and data["heads"] == [[1, 2]] and data["head_names"] == ["L1H2"]
    assert data["n_tokens"] == 1 + len(tiny_model.tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    assert data["truncated"] is False
    for key in ("baseline", "ablated"):
        assert set(data[key]) == {"loss", "top"}
        assert len(data[key]["top"]) == 5 and all(isinstance(t, str) and 0 <= p <= 1 for t, p in data[key]["top"])
    assert result.loss_change == pytest.approx(data["ablated"]["loss"] - data["baseline"]["loss"])


def hooks(loaded):
    """The forward hooks on every attention module (transformers keeps some of its own)."""
    return [dict(block.attn._forward_hooks) for block in loaded.model.transformer.h]


def test_hooks_are_removed_and_the_model_is_unchanged(tiny_model):
    installed = hooks(tiny_model)
    before = ablation.ablate(tiny_model, TEXT, [(0, 0)], bos=True).baseline
    ablation.ablate(tiny_model, TEXT, [(0, 0), (1, 1)], mode="mean", bos=True)
    assert hooks(tiny_model) == installed
    assert ablation.ablate(tiny_model, TEXT, [(0, 0)], bos=True).baseline == before


def test_importance_map_is_one_ablation_per_head(tiny_model):
    calls = []
    imp = ablation.importance_map(tiny_model, TEXT, mode="zero", bos=True, progress=lambda d, t: calls.append((d, t)),
                                  group=1)
    L, H = tiny_model.n_layer, tiny_model.n_head
    assert imp.loss_change.shape == (L, H) and not imp.loss_change.flags.writeable
    # the baseline, then each layer's heads (one batch a layer with group=1)
    assert calls == [(1, L * H + 1)] + [(1 + H * (layer + 1), L * H + 1) for layer in range(L)]
    for layer, head in [(0, 0), (2, 3)]:
        single = ablation.ablate(tiny_model, TEXT, [(layer, head)], bos=True)
        assert imp.loss_change[layer, head] == pytest.approx(single.loss_change, abs=1e-6)
    top = imp.top(3)
    assert top[0][2] == pytest.approx(imp.loss_change.max())
    assert [t[2] for t in top] == sorted((t[2] for t in top), reverse=True)


def test_importance_map_cancels(tiny_model):
    from analysis.errors import AnalysisCancelled

    installed = hooks(tiny_model)
    cancel = threading.Event()
    with pytest.raises(AnalysisCancelled):
        ablation.importance_map(tiny_model, TEXT, progress=lambda d, t: cancel.set() if d >= 3 else None,
                                cancel=cancel, group=1)
    assert hooks(tiny_model) == installed


def test_bad_input_gets_a_sentence(tiny_model):
    with pytest.raises(InputError, match="does not exist"):
        ablation.ablate(tiny_model, TEXT, [(9, 0)])
    with pytest.raises(InputError, match="No heads"):
        ablation.ablate(tiny_model, TEXT, [])
    with pytest.raises(InputError, match="mode"):
        ablation.ablate(tiny_model, TEXT, [(0, 0)], mode="noise")
    with pytest.raises(InputError, match="empty"):
        ablation.ablate(tiny_model, "  ", [(0, 0)])
    with pytest.raises(InputError, match="2 tokens"):
        ablation.ablate(tiny_model, "a", [(0, 0)], bos=False)
    assert ablation.parse_heads("1.0, 2.3", 3, 4) == [(1, 0), (2, 3)]
    for bad in ("1", "a.b", "1.2.3", "", "3.0", "1.0, 2.3,1.0", "1.0,,2.3"):  # a head twice, an empty item
        with pytest.raises(InputError):
            ablation.parse_heads(bad, 3, 4)


@pytest.mark.slow
def test_bundled_importance_map_has_heads_that_matter():
    from analysis.model.loading import load_model

    loaded = load_model("bundled", device="cpu")
    imp = ablation.importance_map(loaded, TEXT)
    assert imp.top(1)[0][2] > 0.05  # some head carries this text's prediction (measured: see the report)


# ----------------------------------------------------------------------------- through a family adapter
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_grouped_query_ablation_matches_weights_times_values(family_run, mode):
    """Llama with 4 query heads on 2 value heads: the edit of o_proj's input against a forward hook
    that recomputes z_h = A_h · V_(h//2) from the module's own weights and v_proj, and adds
    (z̃_h − z_h) W_O^h to the attention output."""
    import torch

    from analysis.run.tokenize import tokenize

    loaded, _ = family_run("llama")
    family, model = loaded.family, loaded.model
    heads = [(0, 1), (1, 2)]
    result = ablation.ablate(loaded, TEXT, heads, mode=mode, bos=True)
    H, g, dk = 4, 2, 16

    def hook(layer, head):
        def add_change(module, args, kwargs, output):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]  # (1, n, d) normed
            kv = head // (H // g)
            v = module.v_proj(hidden)[0, :, kv * dk : (kv + 1) * dk]  # (n, dk)
            z = output[1][0, head] @ v  # (n, dk)
            target = z.mean(dim=0, keepdim=True).expand_as(z) if mode == "mean" else torch.zeros_like(z)
            change = (target - z) @ module.o_proj.weight[:, head * dk : (head + 1) * dk].T  # (n, d)
            return (output[0] + change[None],) + tuple(output[1:])

        return add_change

    blocks = family.blocks(model)
    handles = [family.attention_module(blocks[l]).register_forward_hook(hook(l, h), with_kwargs=True)
               for l, h in heads]
    ids, _, _ = tokenize(loaded, TEXT, True)
    try:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double()
    finally:
        for handle in handles:
            handle.remove()
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:])).item()
    assert result.ablated.loss == pytest.approx(loss, abs=1e-5)
    assert abs(result.loss_change) > 1e-4


def test_an_encoder_family_is_refused_in_one_sentence(family_run):
    loaded, _ = family_run("bert")
    with pytest.raises(InputError, match="encoder"):
        ablation.ablate(loaded, TEXT, [(0, 0)])


def test_a_one_position_model_is_refused_for_what_it_is_not_the_text(tmp_path):
    """A model whose context holds one position cannot give a next-token loss whatever the text: the refusal
    says so instead of asking for a longer text (which would still be cut to 1 token)."""
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    loaded = load_model(str(save_random_family(tmp_path / "m", "llama", n_positions=1)), device="cpu")
    with pytest.raises(InputError) as caught:
        ablation.text_tokens(loaded, "the cat sat on the mat")
    assert str(caught.value) == ("This model's context holds only 1 position: a next-token loss needs 2 tokens, so "
                                 "it cannot be measured on this model.")


def test_a_cap_of_1_token_asks_for_a_higher_cap_not_a_longer_text(tiny_model):
    """The text was cut to 1 token by --max-tokens 1: a longer text would be cut the same, the cap is the limit."""
    with pytest.raises(InputError) as caught:
        ablation.text_tokens(tiny_model, "the cat sat on the mat", bos=False, max_tokens=1)
    assert str(caught.value) == ("A token cap of 1 runs only 1 token of the text, and a next-token loss needs 2; "
                                 "raise the cap (--max-tokens) to at least 2.")
    with pytest.raises(InputError, match="type a longer one"):  # a text of 1 token is too short whatever the cap
        ablation.text_tokens(tiny_model, "A", bos=False, max_tokens=1)
