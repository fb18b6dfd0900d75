"""Head scores on hand-made attention maps whose answers are known."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from analysis.measures import head_scores as hs


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
    ids = np.array([5, 1, 2, 5, 3, 5])  # position 3 repeats 0; position 5 repeats 0 and 3
    a = np.tile(uniform_causal(6), 1)
    a[3] = [0.1, 0.2, 0.3, 0.4, 0, 0]
    a[5] = [0.05, 0.15, 0.2, 0.25, 0.1, 0.25]
    a = stack(a)
    # duplicate (copies j ≤ i−2): pos3 → A[3,0] = 0.1 ; pos5 → A[5,0] + A[5,3] = 0.3 ; mean 0.2
    np.testing.assert_allclose(hs.duplicate_token(a, ids), [[0.2]], rtol=1e-6)
    # induction (copies j ≤ i−3, key j+1): pos3 → A[3,1] = 0.2 ; pos5 → A[5,1] = 0.15 (the copy at 3 is
    # left out: the token after it, 4, is position 5's previous token) ; mean 0.175
    np.testing.assert_allclose(hs.induction(a, ids), [[0.175]], rtol=1e-6)


def test_a_previous_token_head_is_no_induction_or_duplicate_head():
    """"1, 2, 3, 4": the token after the earlier "," is the previous token, so a previous-token head
    once scored induction 1.0 — ranked above the real induction heads. A copy right before the query is
    the previous token too ("the the")."""
    comma = 9
    ids = np.array([1, comma, 2, comma, 3, comma, 4, comma])
    n = len(ids)
    prev = stack(previous_token_map(n))
    # far copies of ",": at 5 the one at 1 (key 2), at 7 those at 1 and 3 (keys 2 and 4): none is i−1
    np.testing.assert_allclose(hs.induction(prev, ids), [[0.0]])
    induction_head = np.zeros((n, n))
    induction_head[np.arange(n), np.arange(n)] = 1
    induction_head[5] = 0
    induction_head[5, 2] = 1.0
    induction_head[7] = 0
    induction_head[7, [2, 4]] = 0.5
    np.testing.assert_allclose(hs.induction(stack(induction_head), ids), [[1.0]])
    doubled = np.array([4, 4, 5, 5])
    assert np.isnan(hs.duplicate_token(stack(previous_token_map(4)), doubled)).all()  # only j = i−1 copies
    assert np.isnan(hs.induction(stack(previous_token_map(4)), ids[:4])).all()  # only copies 2 back


def test_no_repeats_gives_nan():
    a = stack(uniform_causal(4))
    ids = np.array([1, 2, 3, 4])
    assert np.isnan(hs.duplicate_token(a, ids)).all() and np.isnan(hs.induction(a, ids)).all()


def test_scores_never_modify_their_input():
    rng = np.random.default_rng(0)
    a = rng.random((2, 3, 6, 6)).astype(np.float32)
    ids = np.array([1, 2, 1, 2, 3, 1])
    probe = rng.random((2, 3))
    before, ids_before, probe_before = a.copy(), ids.copy(), probe.copy()
    for f in (hs.previous_token, hs.sink, hs.next_token, hs.self_attention, hs.entropy):
        f(a)
    for causal in (True, False):
        hs.self_attention(a, causal=causal)
        hs.entropy(a, causal=causal)
        hs.score_values(a, ids, probe, causal=causal)
        hs.all_scores(_result(a, ids, causal, probe=SimpleNamespace(attentions=a, token_ids=ids)))
    hs.duplicate_token(a, ids)
    hs.induction(a, ids)
    hs.induction_probe(a, ids)
    np.testing.assert_array_equal(a, before)
    np.testing.assert_array_equal(ids, ids_before)
    np.testing.assert_array_equal(probe, probe_before)
    assert a.flags.writeable  # all_scores freezes its own arrays, not the caller's


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match="layer, head, n, n"):
        hs.previous_token(np.zeros((3, 3)))


def test_all_scores_on_a_real_result(tiny_result):
    scores = hs.all_scores(tiny_result)
    assert set(scores.values) == set(hs.SCORE_NAMES)
    for name in hs.SCORE_NAMES:
        assert scores[name].shape == (3, 4)
        assert not scores[name].flags.writeable
    assert scores.causal and not scores.applies("next_token")  # GPT-2 is causal
    np.testing.assert_array_equal(hs.next_token(tiny_result.attentions), 0)  # why: 0 by construction
    assert np.isfinite(scores["induction"]).all()  # the text repeats "The cat sat on the mat"
    assert np.isfinite(scores["induction_probe"]).all()
    probe = tiny_result.probe
    span = probe.span
    np.testing.assert_array_equal(probe.token_ids[1:span + 1], probe.token_ids[span + 1:])
    assert len(set(probe.token_ids[1:span + 1].tolist())) == span
    rows = scores.rows()
    assert len(rows) == 12 and rows[5]["layer"] == 1 and rows[5]["head"] == 1


# ----------------------------------------------------------------------------- causal or bidirectional
def uniform_full(n):
    return np.full((n, n), 1.0 / n)


def next_token_map(n):
    a = np.zeros((n, n))
    a[np.arange(0, n - 1), np.arange(1, n)] = 1
    a[n - 1, n - 1] = 1  # the last query has no next token: it looks at itself
    return a


def reference_entropy(a: np.ndarray, causal: bool) -> float:
    """The normalised entropy of one (n, n) map, written out with scalar loops and math.log."""
    n = a.shape[0]
    rows = range(1, n) if causal else range(n)
    total = 0.0
    for i in rows:
        keys = range(i + 1) if causal else range(n)
        h = -sum(float(a[i, j]) * math.log(float(a[i, j])) for j in keys if a[i, j] > 0)
        total += h / math.log(len(keys))
    return total / len(rows)


def test_bidirectional_entropy_normalises_by_every_key():
    n = 4
    half = np.zeros((n, n))
    half[:, :2] = 0.5  # every row spread evenly over 2 of the 4 keys: log 2 / log 4
    a = stack(uniform_full(n), np.eye(n), half, uniform_causal(n))
    got = hs.entropy(a, causal=False)[0]
    np.testing.assert_allclose(got[:3], [1.0, 0.0, 0.5], atol=1e-6)
    # a causal-uniform map seen as bidirectional: row i spreads over i+1 of the n keys
    expected = np.mean([math.log(i + 1) / math.log(n) for i in range(n)])
    np.testing.assert_allclose(got[3], expected, atol=1e-6)
    # the causal reading of the same causal-uniform map is 1: uniform over every key it can see
    np.testing.assert_allclose(hs.entropy(a)[0, 3], 1.0, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float64, (5, 5), elements=st.floats(0, 1)), st.booleans())
def test_entropy_matches_a_scalar_reference_on_any_stochastic_map(raw, causal):
    a = np.tril(raw) if causal else raw.copy()
    a[np.arange(5), np.arange(5)] += 1e-3  # every row has some mass
    a /= a.sum(axis=1, keepdims=True)
    got = hs.entropy(stack(a), causal=causal)[0, 0]
    assert got == pytest.approx(reference_entropy(a, causal), abs=1e-5)
    assert -1e-6 <= got <= 1 + 1e-6


def test_next_token_on_ideal_heads():
    n = 5
    a = stack(next_token_map(n), previous_token_map(n), uniform_full(n), uniform_causal(n))
    # the ideal head scores 1; previous-token 0; uniform 1/n; anything causal 0 by construction
    np.testing.assert_allclose(hs.next_token(a), [[1.0, 0.0, 1 / n, 0.0]], atol=1e-7)
    assert np.isnan(hs.next_token(np.ones((1, 1, 1, 1)))).all()


def test_self_counts_row_zero_only_when_attention_is_bidirectional():
    n = 4
    a = np.zeros((n, n))
    a[:, 0] = 1  # row 0 on itself; every other row on key 0
    a = stack(a, np.eye(n))
    np.testing.assert_allclose(hs.self_attention(a), [[0.0, 1.0]])
    np.testing.assert_allclose(hs.self_attention(a, causal=False), [[1 / n, 1.0]])


def _result(a, ids, causal=True, probe=None, sliding_windows=()):
    """What ``all_scores`` reads of an AttentionResult."""
    return SimpleNamespace(attentions=a, token_ids=ids, probe=probe, causal=causal, sliding_windows=sliding_windows)


def test_encoder_scores_mark_copying_scores_not_applicable():
    ids = np.array([7, 8, 9, 7, 8, 9])
    a = stack(uniform_full(6), next_token_map(6))
    probe = SimpleNamespace(attentions=a, token_ids=ids)  # a probe is ignored for an encoder
    scores = hs.all_scores(_result(a, ids, causal=False, probe=probe))
    assert not scores.causal
    for name in ("duplicate_token", "induction", "induction_probe"):
        assert not scores.applies(name)
        assert np.isnan(scores[name]).all() and scores.text(name, 0, 0) == "n/a"
    for name in ("previous_token", "sink", "self", "next_token", "entropy"):
        assert scores.applies(name)
    np.testing.assert_allclose(scores["next_token"], [[1 / 6, 1.0]])
    np.testing.assert_allclose(scores["entropy"][0, 0], 1.0)
    np.testing.assert_allclose(scores["self"], [[1 / 6, 1 / 6]])
    row = scores.rows(na=None)[1]
    assert row["induction"] is None and row["next_token"] == 1.0
    assert math.isnan(scores.rows()[1]["induction"])


def test_decoder_scores_mark_next_token_not_applicable():
    ids = np.array([7, 8, 9, 7, 8, 9])
    a = stack(uniform_causal(6))
    scores = hs.all_scores(_result(a, ids))
    assert scores.causal and not scores.applies("next_token")
    assert np.isnan(scores["next_token"]).all() and scores.text("next_token", 0, 0) == "n/a"
    assert scores.applies("induction") and np.isfinite(scores["induction"]).all()
    assert scores.applies("induction_probe") and scores.text("induction_probe", 0, 0) == "nan"  # no probe run
    np.testing.assert_allclose(scores["entropy"], [[1.0]], atol=1e-6)
    assert hs.all_scores(_result(a, ids)).text("sink", 0, 0) == format(float(scores["sink"][0, 0]), ".6g")


def test_applicability_table():
    assert hs.applicable_scores(True) == set(hs.SCORE_NAMES) - {"next_token"}
    assert hs.applicable_scores(False) == set(hs.SCORE_NAMES) - {"duplicate_token", "induction", "induction_probe"}
    not_everywhere = (set(hs.SCORE_NAMES) - hs.applicable_scores(True)) | (
        set(hs.SCORE_NAMES) - hs.applicable_scores(False))
    assert set(hs.NOT_APPLICABLE_WHY) == not_everywhere


def test_one_source_of_names_labels_and_descriptions():
    assert hs.SCORE_NAMES == tuple(s.name for s in hs.HEAD_SCORES)
    assert list(hs.SCORE_LABELS) == list(hs.SCORE_NAMES) and list(hs.SCORE_DESCRIPTIONS) == list(hs.SCORE_NAMES)
    assert all(s.label and s.short and s.description for s in hs.HEAD_SCORES)
    assert len(set(hs.SCORE_SHORT.values())) == len(hs.SCORE_NAMES)
    assert all(bool(s.why_not) == (not s.decoder or not s.encoder) for s in hs.HEAD_SCORES)
    assert hs.SCORE_LABELS["previous_token"] == "previous token"
    assert len(set(hs.SCORE_LABELS.values())) == len(hs.SCORE_NAMES)
    # the columns that existed before next_token keep their place
    assert hs.SCORE_NAMES[:7] == ("previous_token", "sink", "self", "duplicate_token", "induction",
                                  "induction_probe", "entropy")


def test_head_scores_refuse_numbers_in_a_score_that_does_not_apply():
    ok = np.zeros((1, 1))
    with pytest.raises(ValueError, match="not applicable"):
        hs.HeadScores({"sink": ok, "induction": ok}, frozenset({"sink"}))
    with pytest.raises(ValueError, match="without values"):
        hs.HeadScores({"sink": ok}, frozenset({"sink", "entropy"}))
    plain = hs.HeadScores({"sink": ok})  # no table given: everything it holds applies (the scan's means)
    assert plain.applies("sink") and not plain.applies("entropy") and plain.rows() == [
        {"layer": 0, "head": 0, "sink": 0.0}]
    with pytest.raises(TypeError):
        plain.values["sink"] = ok  # the mapping is read-only


# ----------------------------------------------------------------------------- sliding windows
def windowed_uniform(n, w):
    """Uniform over the keys each query sees: j ≤ i and j > i − w."""
    i, j = np.indices((n, n))
    a = ((j <= i) & (j > i - w)).astype(float)
    return a / a.sum(axis=1, keepdims=True)


def test_a_head_uniform_over_its_sliding_window_has_entropy_1_and_counts_only_queries_that_see_token_0():
    """A uniform head over a 3-key window once scored entropy 0.6 (divided by log(i+1), not log 3)."""
    n, w = 9, 3
    a = np.stack([uniform_causal(n)[None], windowed_uniform(n, w)[None]]).astype(np.float32)  # (2, 1, n, n)
    windows = (None, w)
    np.testing.assert_allclose(hs.entropy(a, windows=windows), [[1.0], [1.0]], atol=1e-6)
    assert hs.entropy(a)[1, 0] < 0.8  # read as if it saw every earlier key
    # sink: layer 1's queries 1 and 2 see token 0 (weights 1/2, 1/3); queries 3… cannot and do not count
    np.testing.assert_allclose(hs.sink(a, windows)[1], [(1 / 2 + 1 / 3) / 2], rtol=1e-6)
    np.testing.assert_allclose(hs.sink(a, windows)[0], hs.sink(a)[0])
    ones = np.stack([windowed_uniform(n, 1)[None]] * 2).astype(np.float32)  # a 1-key window: nothing to score
    assert np.isnan(hs.entropy(ones, windows=(1, 1))).all() and np.isnan(hs.sink(ones, (1, 1))).all()
    with pytest.raises(ValueError, match="2 layers"):
        hs.sink(a, (3,))


def test_a_sliding_window_model_reports_the_windows_its_mask_really_has(tmp_path):
    """The windows the scores use are those of the model's own mask: every key w or more back has weight 0."""
    from analysis.run.inference import run_text
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    loaded = load_model(str(save_random_family(tmp_path / "mistral", "mistral", seed=2)), device="cpu")
    result = run_text(loaded, "one two three four five six seven eight nine ten eleven twelve")
    assert result.sliding_windows and set(result.sliding_windows) == {5}
    i, j = np.indices(result.attentions.shape[-2:])
    assert (result.attentions[..., j <= i - 5] == 0).all()
    assert (result.attentions[..., (j > i - 5) & (j <= i)] > 0).all()
    scores = hs.all_scores(result)
    np.testing.assert_allclose(scores["entropy"], hs.entropy(result.attentions, windows=(5,) * loaded.n_layer))


def test_duplicate_and_induction_count_only_copies_in_sight_of_a_sliding_window():
    """A copy farther back than the window has weight 0 by force: counting it diluted the score."""
    ids = np.array([7, 1, 2, 3, 7, 4, 5, 6, 1, 2, 3, 4])  # 7 repeats 4 back; 1, 2, 3 repeat 7 back
    n = len(ids)
    w = 6
    head = windowed_uniform(n, w)
    a = np.stack([head[None], head[None]]).astype(np.float32)  # layer 0: no window; layer 1: window 6 (reads the same map)
    windows = (None, w)
    # by hand, layer 1 (key j in sight of query i when j > i − 6): duplicate — only (4, 0); induction (key j+1)
    # — (4, 0) → key 1 and (11, 5) → key 6 (the copies of 1, 2, 3 at 8, 9, 10 are 7 back: keys 2, 3, 4 out of sight)
    np.testing.assert_allclose(hs.duplicate_token(a, ids, windows)[1], [head[4, 0]], rtol=1e-6)
    np.testing.assert_allclose(hs.induction(a, ids, windows)[1], [(head[4, 1] + head[11, 6]) / 2], rtol=1e-6)
    # layer 0 as without windows: positions 4, 8, 9, 10, 11 (4 repeats 5 back at 11 too)
    np.testing.assert_allclose(hs.induction(a, ids, windows)[0], hs.induction(a, ids)[0])
    assert hs.induction(a, ids)[1, 0] < hs.induction(a, ids, windows)[1, 0]  # diluted by copies out of sight
    assert np.isnan(hs.induction_probe(a, ids, (3, 3))).all()  # no copy 3 back or nearer is in sight of 3 keys


@pytest.mark.parametrize("start,b,width", [(0, 5, 12), (3, 4, 12), (3, 4, 7), (8, 4, 12), (0, 1, 12)])
def test_block_diagonal_and_first_key_sums_equal_a_loop(start, b, width):
    """The diagonal sums read from a view of the block (full width, or a causal block cut after its last key) equal
    a loop over its queries; the first-key sum too, with and without a window hiding key 0 from later queries."""
    from analysis.measures.head_scores import QueryRows, _diagonal_sum, _sink_rows

    rng = np.random.default_rng(start * 31 + b)
    w = rng.random((3, b, width)).astype(np.float32)
    n = 12
    rows = QueryRows(w, start, causal=True, n_keys=n if width < n else None)
    for offset, first, stop in [(-1, 1, n), (0, 1, n), (0, 0, n), (1, 0, min(n - 1, width - 1))]:
        queries = [i for i in range(max(start, first), min(start + b, stop)) if 0 <= i + offset < width]
        want = sum((w[:, i - start, i + offset].astype(np.float64) for i in queries), np.zeros(3))
        got, count = _diagonal_sum(rows, offset, first, stop)
        assert count == len(queries)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for window in (None, 6):
        r = QueryRows(w, start, causal=True, window=window, n_keys=n if width < n else None)
        queries = [i for i in range(max(start, 1), start + b) if window is None or i < window]
        got, count = _sink_rows(r)
        assert count == len(queries)
        np.testing.assert_allclose(got, sum((w[:, i - start, 0].astype(np.float64) for i in queries), np.zeros(3)),
                                   rtol=1e-12)
