"""Direct logit attribution: the components sum to the model's own logit difference, every decoder family."""
import numpy as np
import pytest

from analysis.errors import InputError
from analysis.measures.attribution import attribute, single_token


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "gpt_neox"])
def test_components_sum_to_the_logit_difference(tmp_path, model_type):
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    loaded = load_model(str(save_random_family(tmp_path / model_type, model_type)), device="cpu")
    ids = loaded.tokenizer("the cat sat on the mat", add_special_tokens=False)["input_ids"]
    for wrong, position in ((7, None), (None, 2)):
        result = attribute(loaded, ids, 5, wrong, position)
        assert result.heads.shape == (loaded.n_layer, loaded.n_head) and result.mlps.shape == (loaded.n_layer,)
        assert abs(result.residual_error) < 1e-4 * max(1.0, abs(result.value))
        assert abs(result.value) > 1e-3 and np.abs(result.heads).max() > 1e-4  # really measured
        with pytest.raises(ValueError):
            result.heads[0, 0] = 1.0


def test_a_multi_token_answer_is_refused(tiny_model):
    with pytest.raises(InputError, match="single token") as info:
        single_token(tiny_model, " the cat sat", "answer")
    pieces = tiny_model.family.display_tokens(tiny_model.tokenizer, tiny_model.tokenizer.convert_ids_to_tokens(
        tiny_model.tokenizer(" the cat sat", add_special_tokens=False)["input_ids"]))
    assert f"{pieces[0]!r}" in str(info.value) and "Ġ" not in str(info.value)  # as the token strip shows them
