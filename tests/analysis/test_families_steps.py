"""The table of the recompute's steps (analysis.families.step_views): every step a family names is in it,
and each heatmap shows its FamilyRecomputation field for the right head, in the order of the steps."""
import numpy as np
import pytest

from analysis.families import FAMILIES
from analysis.families.step_views import STEPS, step_views


def test_every_family_step_is_in_the_step_table():
    for family in FAMILIES:
        assert set(family.steps) <= set(STEPS), family.name


# key → (the FamilyRecomputation field, which head): what each heatmap shows, stated here independently
SHOWS = {"x_ln": ("x_ln", None), "q": ("q_before_rotation", "query"), "k": ("k_before_rotation", "kv"),
         "v": ("v_per_kv_head", "kv"), "angles": ("angles", None), "q_rot": ("q", "query"),
         "k_rot": ("k_per_kv_head", "kv"), "scores": ("scores", "query"), "scaled": ("scaled", "query"),
         "masked": ("masked", "query"), "weights": ("weights", "query"), "out": ("head_outputs", "query")}


@pytest.mark.slow
@pytest.mark.parametrize("model_type, keys, norm_title", [
    ("llama", ["x_ln", "q", "k", "v", "angles", "q_rot", "k_rot", "scores", "scaled", "masked", "weights", "out"],
     "input after RMSNorm"),
    ("gpt2", ["x_ln", "q", "k", "v", "scores", "scaled", "masked", "weights", "out"], "input after ln_1 (LayerNorm)"),
    ("bert", ["x_ln", "q", "k", "v", "scores", "scaled", "weights", "out"], "block input (post-LN: no norm)"),
])
def test_step_views_show_each_steps_field_for_its_head(family_run, model_type, keys, norm_title):
    loaded, result = family_run(model_type)
    w = loaded.attention_weights(1)
    rec = loaded.family.recompute(w, result.layer_inputs[1])
    head = 3
    kv_head = head // (w.n_head // w.n_kv_head)  # query head i reads key/value head i // (h/g)
    shown = step_views(rec, head, loaded.family.attention_norm)
    assert [view.key for view in shown] == keys and shown[0].title == norm_title
    for view in shown:
        field, which = SHOWS[view.key]
        expected = getattr(rec, field)
        expected = expected if which is None else expected[head if which == "query" else kv_head]
        np.testing.assert_array_equal(view.values, expected, err_msg=view.key)


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "bert"])
def test_a_recomputation_that_keeps_one_head_is_the_whole_layers_for_that_head(family_run, model_type):
    """recompute(heads=[h]) (the From-scratch tab's selected head): that head's scores … weights equal the whole
    recomputation's, no other head's n² steps are kept, and the layer's output (every head through W_O) is the
    same; a head not kept is refused by name."""
    loaded, result = family_run(model_type)
    layer = 1
    whole = loaded.recompute(layer, result.layer_inputs[layer], np.float64)
    for head in (0, loaded.n_head - 1):
        one = loaded.recompute(layer, result.layer_inputs[layer], np.float64, heads=[head])
        for field in ("scores", "scaled", "masked", "weights"):
            assert getattr(one, field).shape == (1, result.n_tokens, result.n_tokens)
            np.testing.assert_allclose(one.of_head(field, head), whole.of_head(field, head), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(one.head_outputs, whole.head_outputs, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(one.output, whole.output, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(one.heads, [head])
        other = (head + 1) % loaded.n_head
        with pytest.raises(ValueError, match=f"head {other} was not kept"):
            one.of_head("weights", other)
        assert one.of_head("q", other).shape == whole.q[other].shape  # q, k, v: every head, always
    with pytest.raises(ValueError, match="heads must be in"):
        loaded.recompute(layer, result.layer_inputs[layer], np.float64, heads=[loaded.n_head])
