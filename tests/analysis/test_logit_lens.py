"""The logit lens against transformers' own ``output_hidden_states``: row l is lm_head(final_norm(hidden_states[l
+ 1])) for l < L − 1 (transformers' last hidden state already has the final norm applied, so the last row is compared
with the model's logits); surprisal against the log-softmax of the logits; on GPT-2, Llama (GQA) and NeoX."""
import numpy as np
import pytest
import torch

from analysis.measures.logit_lens import logit_lens

IDS = [3, 17, 5, 9, 3, 17, 5, 22, 8, 1]


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "gpt_neox"])
def test_lens_rows_equal_final_norm_of_hidden_states(tmp_path, model_type):
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    import transformers as tf

    folder = save_random_family(tmp_path / model_type, model_type)
    config = tf.AutoConfig.from_pretrained(folder)
    config.update({"n_layer" if model_type == "gpt2" else "num_hidden_layers": 4})  # rows 1, 2 are neither end
    torch.manual_seed(0)
    tf.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    loaded = load_model(str(folder), device="cpu")
    assert loaded.n_layer == 4
    lens = logit_lens(loaded, IDS)
    model = loaded.model
    with torch.no_grad():
        out = model(input_ids=torch.tensor([IDS]), output_hidden_states=True)
        norm, head = loaded.family.final_norm(model), model.get_output_embeddings()
        L = loaded.n_layer
        for layer in range(L):
            logits = out.logits[0] if layer == L - 1 else head(norm(out.hidden_states[layer + 1]))[0]
            p = torch.softmax(logits.double(), -1).numpy()
            np.testing.assert_array_equal(lens.top[layer], p.argmax(-1))
            np.testing.assert_allclose(lens.prob[layer], p.max(-1), atol=1e-6)
            final = torch.softmax(out.logits[0].double(), -1).numpy().argmax(-1)
            own = p[np.arange(len(IDS)), final]
            np.testing.assert_array_equal(lens.final_rank[layer], (p > own[:, None]).sum(-1))
        logp = torch.log_softmax(out.logits[0].double(), -1).numpy()
    np.testing.assert_allclose(lens.surprisal[:-1], -logp[np.arange(len(IDS) - 1), IDS[1:]], atol=1e-6)
    assert np.isnan(lens.surprisal[-1])
    assert (lens.final_rank[-1] == 0).all()
    assert lens.first_layer_on_top(int(lens.top[-1, -1])) is not None
    with pytest.raises(ValueError):
        lens.top[0, 0] = 1
