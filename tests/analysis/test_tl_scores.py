"""TransformerLens-style detector scores on hand-made patterns whose scores are worked out by hand."""
import numpy as np
import pytest

from analysis.measures import tl_patterns as tp
from analysis.measures import tl_scores as tl


def previous_head(n):
    a = np.eye(n, k=-1)
    a[0, 0] = 1.0  # row 0 can only attend to itself
    return a


def uniform(n):
    u = np.tril(np.ones((n, n)))
    return u / u.sum(axis=1, keepdims=True)


def test_patterns_for_a_repeated_pair():
    ids = np.array([5, 6, 5, 6])
    np.testing.assert_array_equal(tp.previous_token_pattern(4), [[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(tp.duplicate_token_pattern(ids), [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]])
    np.testing.assert_array_equal(tp.induction_pattern(ids), [[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])
    # a token right after its own copy: the token after the copy is the current one (TL keeps it)
    np.testing.assert_array_equal(tp.induction_pattern(np.array([3, 3])), [[0, 0], [0, 1]])
    assert tp.detection_pattern("induction_head", ids).sum() == 2
    with pytest.raises(ValueError):
        tp.detection_pattern("sink_head", ids)


def test_mul_and_abs_on_a_perfect_previous_token_head():
    a = previous_head(4)
    p = tp.previous_token_pattern(4)
    # mul: 3 of the 4 units of attention sit on P (row 0's is on itself)
    assert tp.similarity_score(a, p, error_measure="mul") == pytest.approx(0.75)
    # exclude_bos zeroes column 0: rows 0 and 1 lose their weight; the rest, 2 units, all on P
    assert tp.similarity_score(a, p, exclude_bos=True, error_measure="mul") == pytest.approx(1.0)
    # exclude_current_token zeroes the diagonal: only row 0's self-weight goes; 3 of 3 on P
    assert tp.similarity_score(a, p, exclude_current_token=True, error_measure="mul") == pytest.approx(1.0)
    # abs: |A − P| is 1 at (0, 0) only: Σ/n = 0.25
    assert tp.similarity_score(a, p, error_measure="abs") == pytest.approx(0.75)
    assert tp.similarity_score(a, p, exclude_bos=True, error_measure="abs") == pytest.approx(1.0)
    assert tp.similarity_score(a, p, exclude_current_token=True, error_measure="abs") == pytest.approx(1.0)


def test_mul_and_abs_on_a_uniform_head_with_a_duplicate():
    a = uniform(3)  # rows (1,0,0), (½,½,0), (⅓,⅓,⅓)
    p = tp.duplicate_token_pattern(np.array([1, 2, 1]))  # P[2, 0] = 1
    assert tp.similarity_score(a, p, error_measure="mul") == pytest.approx(1 / 9)
    # diagonal gone: Σ A' = 0 + ½ + ⅔ = 7/6, of which ⅓ on P
    assert tp.similarity_score(a, p, exclude_current_token=True, error_measure="mul") == pytest.approx(2 / 7)
    # both: Σ A' = ⅓ (row 2, column 1), nothing on P
    assert tp.similarity_score(a, p, exclude_bos=True, exclude_current_token=True, error_measure="mul") == 0.0
    # abs: row sums of |A − P| are 1, 1, 4/3 → Σ/n = 10/9 = 1.111 (3 decimals) → 1 − 1.111
    assert tp.similarity_score(a, p, error_measure="abs") == pytest.approx(1 - 1.111, abs=1e-12)
    # exclude_bos: rows 0, ½, ⅔ → 7/18 = 0.389
    assert tp.similarity_score(a, p, exclude_bos=True, error_measure="abs") == pytest.approx(1 - 0.389, abs=1e-12)
    # exclude_current_token: rows 0, ½, 2/3 + 1/3 = 1 → 1.5/3 = 0.5
    assert tp.similarity_score(a, p, exclude_current_token=True, error_measure="abs") == pytest.approx(0.5)


def test_mul_with_everything_excluded_is_nan():
    a = np.eye(2)
    a[1] = [1, 0]
    assert np.isnan(tp.similarity_score(a, tp.previous_token_pattern(2), exclude_bos=True,
                                        exclude_current_token=True))


def test_inputs_are_never_modified():
    a = np.stack([previous_head(4), uniform(4)])[None].astype(np.float32)  # (1, 2, 4, 4)
    before = a.copy()
    ids = np.array([5, 6, 5, 6])
    for measure in ("mul", "abs"):
        tl.detect(a, ids, "induction_head", exclude_bos=True, exclude_current_token=True, error_measure=measure)
        tp.similarity_score(a[0, 0], tp.previous_token_pattern(4), exclude_bos=True, exclude_current_token=True,
                            error_measure=measure)
    np.testing.assert_array_equal(a, before)
    a.setflags(write=False)  # read-only input (as in AttentionResult) works too
    tl.detect(a, ids, "previous_token_head", exclude_bos=True, error_measure="abs")


def test_detect_scores_every_head_or_the_chosen_ones():
    a = np.stack([np.stack([previous_head(4), uniform(4)]), np.stack([uniform(4), previous_head(4)])])
    ids = np.array([1, 2, 3, 4])
    all_heads = tl.detect(a, ids, "previous_token_head")
    u = uniform(4)
    expected_uniform = (u[1, 0] + u[2, 1] + u[3, 2]) / 4
    np.testing.assert_allclose(all_heads, [[0.75, expected_uniform], [expected_uniform, 0.75]])
    chosen = tl.detect(a, ids, "previous_token_head", heads=[(1, 1)])
    np.testing.assert_allclose(chosen, [[-1, -1], [-1, 0.75]])
    np.testing.assert_allclose(tl.detect(a, ids, "previous_token_head", heads={0: [1]}),
                               [[-1, expected_uniform], [-1, -1]])
    # a matrix pattern is used as given
    np.testing.assert_allclose(tl.detect(a, ids, tp.previous_token_pattern(4)), all_heads)
    with pytest.raises(ValueError):
        tl.detect(a, ids, "previous_token_head", heads=[(2, 0)])
    with pytest.raises(ValueError):
        tl.detect(a, ids, np.ones((4, 4)))  # not lower triangular
    with pytest.raises(ValueError):
        tl.detect(a, ids, "previous_token_head", error_measure="sq")
    with pytest.raises(ValueError):
        tl.detect(a[..., :1, :1], ids[:1], "previous_token_head")


def test_detect_many_passes_every_option_on():
    a1 = np.stack([previous_head(4), uniform(4)])[None]
    a2 = np.stack([uniform(4), previous_head(4)])[None]
    ids = np.array([1, 2, 3, 4])
    runs = [(a1, ids), (a2, ids)]
    options = dict(heads=[(0, 0)], exclude_bos=True, error_measure="abs")
    many = tl.detect_many(runs, "previous_token_head", **options)
    expected = (tl.detect(a1, ids, "previous_token_head", **options)
                + tl.detect(a2, ids, "previous_token_head", **options)) / 2
    np.testing.assert_allclose(many, expected)
    assert many[0, 1] == -1  # heads was honoured (TL's list path would score every head)
    # exclude_bos was honoured: without it head 0.0 scores lower on both texts
    assert many[0, 0] > tl.detect_many(runs, "previous_token_head", heads=[(0, 0)], error_measure="abs")[0, 0]
    # heads given as a one-shot iterator still applies to every text
    it = tl.detect_many(runs, "previous_token_head", heads=iter([(0, 0)]), exclude_bos=True, error_measure="abs")
    np.testing.assert_allclose(it, many)
    with pytest.raises(ValueError):
        tl.detect_many([], "induction_head")


# ----------------------------------------------------------------------------- every head at once
def random_attention(rng, shape, causal=True, dtype=np.float64, sharp=4):
    """Softmax-like rows (L, H, n, n): lower triangular when causal, some mass piled on key 0."""
    a = rng.random(shape) ** sharp
    a[..., 0] += rng.random(shape[:-1])
    if causal:
        a = np.tril(a)
    return (a / a.sum(axis=-1, keepdims=True)).astype(dtype)


@pytest.mark.parametrize("x", np.geomspace(7e-6, 1e-2, 25))
def test_mul_keeps_its_precision_when_almost_all_attention_is_excluded(x):
    """Row 1 = [x, 1 − x] without its diagonal: all that is left is on the previous token, so TL's score
    is exactly 1 (Σ A − Σ diag over float32 row sums would give 1 − 3.8e-3 at x = 7e-6)."""
    a = np.array([[[[1, 0], [x, 1 - x]]]], dtype=np.float32)
    assert tl._detect_per_head(a, np.array([1, 2]), "previous_token_head", exclude_current_token=True)[0, 0] == 1
    score = tl.detect(a, np.array([1, 2]), "previous_token_head", exclude_current_token=True)[0, 0]
    assert score == pytest.approx(1.0, rel=1e-9)


OPTIONS = [dict(error_measure=m, exclude_bos=b, exclude_current_token=c)
           for m in tp.ERROR_MEASURES for b in (False, True) for c in (False, True)]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_head_at_once_equals_the_per_head_loop(options, dtype):
    rng = np.random.default_rng(11)
    a = random_attention(rng, (3, 4, 40, 40), dtype=dtype)
    ids = rng.integers(0, 6, 40)  # many repeats: dense duplicate and induction patterns
    # "abs" is rounded to 3 decimals: equal to the reference exactly (a value near a rounding boundary is
    # decided by the reference itself); "mul" to rounding (its sums run in another order)
    atol = 0 if options["error_measure"] == "abs" else (1e-13 if dtype == np.float64 else 1e-6)
    every = tl.detect_all(a, ids, **options)
    for name in tp.HEAD_NAMES:
        expected = tl._detect_per_head(a, ids, name, **options)
        np.testing.assert_allclose(every[name], expected, rtol=0, atol=atol)
        np.testing.assert_array_equal(tl.detect(a, ids, name, **options), every[name])  # one path
        chosen = [(0, 1), (2, 3), (2, 0)]
        np.testing.assert_allclose(tl.detect(a, ids, name, heads=chosen, **options),
                                   tl._detect_per_head(a, ids, name, heads=chosen, **options), rtol=0, atol=atol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("exclude_bos", [False, True])
def test_abs_near_a_rounding_boundary_equals_the_reference(dtype, exclude_bos):
    # head k: A = [[1, 0], [a, 1 − a]] against the previous-token pattern: Σ|A − P| / 2 = 0.5 + (1 − a),
    # with 1 − a = k · 0.0005 ± a little: ties and near-ties of the 3-decimal rounding, where a sum in
    # another order could round the other way
    offsets = np.array([k * 5e-4 + d for k in range(1, 12) for d in (0.0, 1e-9, -1e-9, 1e-13, -1e-13)])
    a = np.zeros((1, offsets.size, 2, 2))
    a[0, :, 0, 0] = 1.0
    a[0, :, 1, 0] = 1.0 - offsets
    a[0, :, 1, 1] = offsets
    a = a.astype(dtype)
    ids = np.array([1, 2])
    got = tl.detect(a, ids, "previous_token_head", error_measure="abs", exclude_bos=exclude_bos)
    expected = tl._detect_per_head(a, ids, "previous_token_head", error_measure="abs", exclude_bos=exclude_bos)
    np.testing.assert_array_equal(got, expected)


def test_signed_weights_and_an_all_excluded_head_equal_the_reference():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(2, 3, 6, 6))  # not attention, but TL's formulas are defined for it
    a[0, 0] = 0.0
    a[0, 0, :, 0] = 1.0  # everything in column 0: with exclude_bos, "mul" has nothing left (NaN)
    ids = np.array([1, 2, 1, 2, 1, 2])
    for options in OPTIONS:
        for name in tp.HEAD_NAMES:
            got = tl.detect(a, ids, name, **options)
            expected = tl._detect_per_head(a, ids, name, **options)
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
            assert np.array_equal(np.isnan(got), np.isnan(expected))
    assert np.isnan(tl.detect(a, ids, "previous_token_head", exclude_bos=True)[0, 0])


def test_detect_all_never_modifies_its_input():
    rng = np.random.default_rng(5)
    a = random_attention(rng, (2, 2, 12, 12), dtype=np.float32)
    before = a.copy()
    a.setflags(write=False)
    for options in OPTIONS:
        tl.detect_all(a, rng.integers(0, 3, 12), **options)
    np.testing.assert_array_equal(a, before)


# ----------------------------------------------------------------------------- the command line's scores_tl.csv
def _read_tl_csv(path):
    import csv

    with path.open(encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


@pytest.mark.parametrize("options", [(), ("--tl-measure", "abs", "--tl-exclude-bos"),
                                     ("--tl-exclude-current-token",)])
def test_export_writes_tl_scores_equal_to_tl_head_by_head(tiny_model_dir, tmp_path, capsys, options):
    """scores_tl.csv against ``similarity_score`` (TL's per-head function transcribed) on the exported attention,
    with the options named in every row, so a user can compare with TransformerLens without the GUI."""
    from helpers import run_main

    code, _, err = run_main(capsys, "export", "--model", tiny_model_dir, "--text", "the cat the cat the cat",
                            "--out", tmp_path / "x", "--no-head-images", "--bos", *options)
    assert code == 0, err
    measure = options[options.index("--tl-measure") + 1] if "--tl-measure" in options else "mul"
    exclude_bos, exclude_current = "--tl-exclude-bos" in options, "--tl-exclude-current-token" in options
    header, rows = _read_tl_csv(tmp_path / "x" / "scores_tl.csv")
    assert header == ["layer", "head", "previous_token_head", "duplicate_token_head", "induction_head",
                      "error_measure", "exclude_bos", "exclude_current_token"]
    with np.load(tmp_path / "x" / "attention.npz") as data:
        attentions, ids = data["attentions"], data["token_ids"]
    L, H = attentions.shape[:2]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(l, h) for l in range(L) for h in range(H)]
    for row in rows:
        layer, head = int(row[0]), int(row[1])
        assert row[5:] == [measure, str(exclude_bos).lower(), str(exclude_current).lower()]
        for k, name in enumerate(tp.HEAD_NAMES):
            want = tp.similarity_score(attentions[layer, head], tp.detection_pattern(name, ids),
                                       exclude_bos=exclude_bos, exclude_current_token=exclude_current,
                                       error_measure=measure)
            assert float(row[2 + k]) == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_a_one_token_text_has_no_tl_scores(tiny_result, tmp_path):
    """TL refuses a text under 2 tokens; the file says nan for every head instead of failing the export."""
    import dataclasses

    from analysis.export.writers import write_tl_scores_csv

    one = dataclasses.replace(tiny_result, attentions=tiny_result.attentions[:, :, :1, :1],
                              token_ids=tiny_result.token_ids[:1])
    _, rows = _read_tl_csv(write_tl_scores_csv(one, tmp_path / "tl.csv"))
    assert rows and all(cell == "nan" for row in rows for cell in row[2:5])
