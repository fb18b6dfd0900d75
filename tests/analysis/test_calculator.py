"""The attention calculator reproduces the lesson's worked example and refuses bad input clearly."""
import numpy as np
import pytest

from analysis.errors import InputError
from analysis.lessons.calculator import attend

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


# ----------------------------------------------------------------------------- stable: never NaN
def test_huge_scores_give_the_exact_weights_not_nan():
    """QKᵀ = [1e400, 1e200] overflows float64; the weights are still [1, 0] (1e400 ≫ 1e200)."""
    import json
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warnings leak
        r = attend([1e200], [[1e200], [1]], [[1, 2], [3, 4]])
    assert r.weights.tolist() == [[1.0, 0.0]] and r.output.tolist() == [[1.0, 2.0]]
    assert np.isposinf(r.scores[0, 0]) and r.scores[0, 1] == 1e200
    assert r.notes and "beyond 64-bit floats" in r.notes[0]
    d = r.to_dict()
    json.dumps(d, allow_nan=False)  # valid JSON: no NaN / Infinity tokens
    assert d["scores"][0][0] is None and d["weights"] == [[1.0, 0.0]]


def test_the_reported_overflow_case_is_valid_json_and_sums_to_one():
    import json

    r = attend([1e308, 1e308], [[1e308, 1e308], [1, 1]], [[1, 2], [3, 4]])
    assert r.weights.tolist() == [[1.0, 0.0]] and r.to_dict()["row_sums"] == [1.0]
    assert not np.isnan(r.weights).any() and not np.isnan(r.output).any()
    json.dumps(r.to_dict(), allow_nan=False)


@pytest.mark.parametrize("scale", [1e150, 1e160, 1e200, 1e300])
def test_overflow_path_agrees_with_a_log_space_reference(scale):
    """Independent computation: the weights of c·R with c huge are a one-hot on each row's max
    (ties split evenly) whenever the gaps times c exceed ~745 — checked against R computed directly."""
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    r = attend(q * scale, k * scale, np.eye(5))
    raw = q @ k.T
    expected = (raw == raw.max(axis=1, keepdims=True)).astype(float)
    np.testing.assert_array_equal(r.weights, expected)
    np.testing.assert_allclose(r.weights.sum(axis=1), 1.0)


def test_moderate_scores_take_the_ordinary_path_unchanged():
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=(3, 4)) * 30, rng.normal(size=(3, 4)) * 30, rng.normal(size=(3, 2))
    r = attend(q, k, v)
    s = q @ k.T / 2.0
    expected = np.exp(s - s.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(r.weights, expected, rtol=1e-12)
    assert r.notes == ()


def test_causal_with_more_queries_than_keys_is_an_input_error():
    """Refused in one sentence, not NaN rows: queries are the last positions of the keys, so each needs a key of its own."""
    with pytest.raises(InputError, match="3 queries need at least 3 keys, K has 1"):
        attend([[1], [2], [3]], [[1]], [[1]], causal=True)
    r = attend([[1], [2]], [[1], [2], [3]], [[1], [2], [3]], causal=True)  # 2 queries at key positions 1, 2
    assert r.weights[0, 2] == 0 and r.weights[1, 2] > 0
    np.testing.assert_allclose(r.weights.sum(axis=1), 1.0)


@pytest.mark.parametrize("text,message", [
    ("[" + "1" * 400 + "]", "too large for a 64-bit float"),  # 10**400, an int json accepts
    ("[1e400]", "finite"),
    ("[" * 50_000, "nested too deeply"),
    ("[[1, 2], [3]]", "ragged"),
    ('["1"]', "numbers only"),
    ("[true, 1]", "numbers only"),
    ("[[[1]]]", "numbers only"),
    ('{"a": 1}', "vector or a table"),
    ("[1,", "not JSON"),
])
def test_parse_matrix_answers_every_bad_input_with_a_sentence(text, message):
    from analysis.lessons.calculator import parse_matrix

    with pytest.raises(InputError, match=message) as caught:
        parse_matrix(text, "--q")
    assert str(caught.value).startswith("--q ") and "\n" not in str(caught.value)
