"""Head scores on hand-made attention maps whose answers are known."""
import numpy as np
import pytest

from analysis import head_scores as hs


def stack(*maps):
    """(n, n) maps → (1, k, n, n): one layer, one head per map."""
    return np.stack(maps)[None].astype(np.float32)


def previous_token_map(n):
    a = np.zeros((n, n))
    a[0, 0] = 1
    a[np.arange(1, n), np.arange(0, n - 1)] = 1
    return a


def sink_map(n):
    a = np.zeros((n, n))
    a[:, 0] = 1
    return a


def uniform_causal(n):
    a = np.tril(np.ones((n, n)))
    return a / a.sum(axis=1, keepdims=True)


def test_previous_sink_self_on_ideal_heads():
    a = stack(previous_token_map(6), sink_map(6), np.eye(6))
    # at i = 1 the previous token *is* the first token: 1 of the 5 rows i ≥ 1 counts for both
    np.testing.assert_allclose(hs.previous_token(a), [[1, 0.2, 0]])
    np.testing.assert_allclose(hs.sink(a), [[0.2, 1, 0]])
    np.testing.assert_allclose(hs.self_attention(a), [[0, 0, 1]])


def test_uniform_head_has_known_values():
    n = 5
    a = stack(uniform_causal(n))
    expected_prev = np.mean([1 / (i + 1) for i in range(1, n)])
    np.testing.assert_allclose(hs.previous_token(a), [[expected_prev]])
    np.testing.assert_allclose(hs.sink(a), [[expected_prev]])
    np.testing.assert_allclose(hs.entropy(a), [[1.0]], atol=1e-6)
    np.testing.assert_allclose(hs.entropy(stack(sink_map(n))), [[0.0]], atol=1e-9)


def test_duplicate_and_induction_on_a_repeated_sequence():
    # tokens: A B C A B C ; positions 3,4,5 repeat 0,1,2
    ids = np.array([7, 8, 9, 7, 8, 9])
    n = len(ids)
    induction_head = np.zeros((n, n))
    duplicate_head = np.zeros((n, n))
    for i in range(n):
        induction_head[i, i] = duplicate_head[i, i] = 1.0  # default: self
    for i in (3, 4, 5):
        induction_head[i] = 0
        induction_head[i, i - 2] = 1.0  # the token after the earlier copy of tok[i]
        duplicate_head[i] = 0
        duplicate_head[i, i - 3] = 1.0  # the earlier copy itself
    a = stack(induction_head, duplicate_head)
    np.testing.assert_allclose(hs.induction(a, ids), [[1.0, 0.0]])
    np.testing.assert_allclose(hs.duplicate_token(a, ids), [[0.0, 1.0]])


def test_several_earlier_occurrences_are_summed_then_averaged():
    ids = np.array([5, 5, 5])  # position 1 repeats 0; position 2 repeats 0 and 1
    a = np.zeros((3, 3))
    a[0, 0] = 1
    a[1] = [0.25, 0.75, 0]
    a[2] = [0.1, 0.3, 0.6]
    a = stack(a)
    # duplicate: pos1 → A[1,0]=0.25 ; pos2 → A[2,0]+A[2,1]=0.4 ; mean 0.325
    np.testing.assert_allclose(hs.duplicate_token(a, ids), [[0.325]])
    # induction: pos1 → A[1,1]=0.75 ; pos2 → A[2,1]+A[2,2]=0.9 ; mean 0.825
    np.testing.assert_allclose(hs.induction(a, ids), [[0.825]])


def test_no_repeats_gives_nan():
    a = stack(uniform_causal(4))
    ids = np.array([1, 2, 3, 4])
    assert np.isnan(hs.duplicate_token(a, ids)).all() and np.isnan(hs.induction(a, ids)).all()


def test_scores_never_modify_their_input():
    rng = np.random.default_rng(0)
    a = rng.random((2, 3, 6, 6)).astype(np.float32)
    ids = np.array([1, 2, 1, 2, 3, 1])
    before, ids_before = a.copy(), ids.copy()
    for f in (hs.previous_token, hs.sink, hs.self_attention, hs.entropy):
        f(a)
    hs.duplicate_token(a, ids)
    hs.induction(a, ids)
    hs.induction_probe(a, ids)
    np.testing.assert_array_equal(a, before)
    np.testing.assert_array_equal(ids, ids_before)


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match="layer, head, n, n"):
        hs.previous_token(np.zeros((3, 3)))


def test_all_scores_on_a_real_result(tiny_result):
    scores = hs.all_scores(tiny_result)
    assert set(scores.values) == set(hs.SCORE_NAMES)
    for name in hs.SCORE_NAMES:
        assert scores[name].shape == (3, 4)
        assert not scores[name].flags.writeable
    assert np.isfinite(scores["induction"]).all()  # the text repeats "The cat sat on the mat"
    assert np.isfinite(scores["induction_probe"]).all()
    probe = tiny_result.probe
    span = probe.span
    np.testing.assert_array_equal(probe.token_ids[1:span + 1], probe.token_ids[span + 1:])
    assert len(set(probe.token_ids[1:span + 1].tolist())) == span
    rows = scores.rows()
    assert len(rows) == 12 and rows[5]["layer"] == 1 and rows[5]["head"] == 1
