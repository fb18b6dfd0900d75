"""The attention calculator reproduces the lesson's worked example and refuses bad input clearly."""
import numpy as np
import pytest

from analysis.errors import InputError
from analysis.manual_attention import attend

# ../shared/reference/001: "it" attends to server / request / it
Q_IT = [1.0, 0.0, 0.5, 1.0]
K = [[1.0, 0.0, 0.8, 1.0], [0.0, 1.0, 0.2, 0.0], [0.2, 0.2, 0.4, 0.1]]
V = [[0.9, 0.1, 0.7, 0.8], [0.1, 0.9, 0.2, 0.1], [0.3, 0.3, 0.5, 0.2]]


def test_worked_example_from_the_lesson():
    r = attend(Q_IT, K, V)
    np.testing.assert_allclose(r.scores[0], [2.40, 0.10, 0.50], atol=1e-12)
    np.testing.assert_allclose(r.scaled[0], [1.20, 0.05, 0.25], atol=1e-12)
    assert r.sqrt_d_k == 2.0
    assert np.round(r.weights[0], 4).tolist() == [0.5871, 0.1859, 0.2270]
    assert np.round(r.output[0], 4).tolist() == [0.6151, 0.2941, 0.5616, 0.5337]


def test_rows_sum_to_one_and_outputs_are_convex_mixtures():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(5, 8)), rng.normal(size=(5, 8)), rng.normal(size=(5, 3))
    r = attend(q, k, v)
    np.testing.assert_allclose(r.weights.sum(axis=1), 1.0, atol=1e-12)
    assert (r.output >= v.min(axis=0) - 1e-12).all() and (r.output <= v.max(axis=0) + 1e-12).all()


def test_causal_masks_before_softmax():
    r = attend(K, K, V, causal=True)
    assert np.isneginf(r.masked[0, 1]) and np.isneginf(r.masked[0, 2]) and np.isneginf(r.masked[1, 2])
    assert r.weights[0, 0] == 1.0 and r.weights[0, 1] == 0.0
    np.testing.assert_allclose(r.weights.sum(axis=1), 1.0)
    np.testing.assert_allclose(r.output[0], V[0])
    d = r.to_dict()
    assert d["masked"][0][1] is None and d["row_sums"] == pytest.approx([1, 1, 1])


def test_matches_torch_reference():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(6, 16)), rng.normal(size=(6, 16)), rng.normal(size=(6, 4))
    for causal in (False, True):
        ref = torch.nn.functional.scaled_dot_product_attention(
            *(torch.tensor(x) for x in (q, k, v)), is_causal=causal).numpy()
        np.testing.assert_allclose(attend(q, k, v, causal=causal).output, ref, atol=1e-12)


@pytest.mark.parametrize("q,k,v,message", [
    ([[1, 2]], [[1, 2, 3]], [[1]], "same width"),
    ([[1, 2]], [[1, 2], [3, 4]], [[1]], "one row per key"),
    ([["a", 2]], [[1, 2]], [[1]], "numbers"),
    ([[1, float("nan")]], [[1, 2]], [[1]], "finite"),
])
def test_bad_matrices_are_refused_with_a_message(q, k, v, message):
    with pytest.raises(InputError, match=message):
        attend(q, k, v)
