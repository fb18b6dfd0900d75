"""Activation patching: does this head (position, layer) carry what makes the clean prompt's answer?

Two prompts of the same token count, a *clean* one ("When Mary and John went to the store, John gave a drink to")
and a *corrupted* one ("… Mary gave a drink to"), and a metric m of a run's logits (:class:`Metric`):

- ``logit_diff``: logit(answer) − logit(wrong) at the read position (default the last);
- ``logprob``: log p(answer) there (natural log, the model's full softmax);
- ``loss``: −(mean next-token NLL of the clean text's own tokens), so that higher is better as for the others.

*Denoising* (the default) runs the corrupted prompt with one activation taken from the clean run; *noising* runs
the clean prompt with one activation from the corrupted run. Either way the map is the normalised effect

    effect = (m_patched − m_corrupted) / (m_clean − m_corrupted)

(denoising: 1 = this activation alone restores the clean answer, 0 = it does nothing; noising: 1 = removing it
changes nothing, 0 = removing it destroys the answer). What is patched (``what``):

- ``heads``: head h's output z_h (its softmax weights · V, before W_O) at every position — the head's slice of
  W_O's input; a (layer, head) map;
- ``head_positions``: z_h at one position p at a time; (layer, head, position);
- ``resid``: the residual stream entering block l at position p; (layer, position);
- ``layers``: the attention sub-layer's output (after W_O) and the MLP's output (block output − block input −
  attention output, so a parallel residual is covered) at every position; (layer, 2): [attention, mlp].

How: both prompts run once (``run.resume.cache_stream``), keeping each block's input, each layer's z and attention
output. Nothing before the patched layer changes, so each patch re-runs only the blocks from its layer on, the
patches of one layer as rows of one batch (``run.resume``), and only the read position is decoded. Tested against
forward hooks written in the tests that patch one activation in a whole forward, on GPT-2, Llama (GQA) and NeoX.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np

from ..errors import AnalysisCancelled, InputError

WHAT = ("heads", "head_positions", "resid", "layers")
METRICS = ("logit_diff", "logprob", "loss")
What = Literal["heads", "head_positions", "resid", "layers"]
#: At most this many tokens (rows × n) of residual stream go through the blocks at once.
STREAM_TOKENS = 4096
ProgressCallback = Callable[[int, int], None]  # (done, total) patches


@dataclass(frozen=True)
class Metric:
    """What a run is scored by (module docstring); ``answer``/``wrong`` are token ids, ``position`` the row read."""

    kind: str  # logit_diff, logprob or loss
    label: str  # "logit(' Mary') − logit(' John')", for people
    answer: int | None = None
    wrong: int | None = None
    position: int = -1

    def of_logits(self, logits) -> np.ndarray:
        """The metric of each row of ``logits`` (R, vocab) at the read position (logit_diff, logprob; ``loss`` is
        scored from the residual stream by ``ablation._decoded_losses``)."""
        import torch

        x = logits.double()
        if self.kind == "logprob":
            return torch.log_softmax(x, -1)[:, self.answer].cpu().numpy()
        return (x[:, self.answer] - x[:, self.wrong]).cpu().numpy()


def make_metric(loaded, kind: str, answer: str | None = None, wrong: str | None = None,
                position: int | None = None) -> Metric:
    """The metric ``kind`` with its answers as typed (" Mary", leading space included: each one token)."""
    from .attribution import single_token

    if kind not in METRICS:
        raise InputError(f"Unknown metric '{kind}': use {', '.join(METRICS)}.")
    if kind == "loss":
        return Metric("loss", "−loss of the clean text (nats)")
    if answer is None:
        raise InputError(f"The metric {kind} needs an answer token (--answer ' Mary').")
    a = single_token(loaded, answer, "answer")
    p = -1 if position is None else int(position)
    typed = lambda i: loaded.tokenizer.decode([i])  # noqa: E731 - the text as typed, not the byte-level piece
    if kind == "logprob":
        return Metric("logprob", f"log p({typed(a)!r})", a, None, p)
    if wrong is None:
        raise InputError("The metric logit_diff needs a wrong answer too (--wrong ' John'), or use --metric logprob.")
    b = single_token(loaded, wrong, "wrong answer")
    if a == b:
        raise InputError(f"The answer and the wrong answer are the same token ({answer!r}): the logit difference "
                         "would be 0.")
    return Metric("logit_diff", f"logit({typed(a)!r}) − logit({typed(b)!r})", a, b, p)


def pair_ids(loaded, clean_ids: list[int], corrupted_ids: list[int], needs: str = "patching") -> None:
    """Refuse (one sentence) a clean and corrupted prompt of different token counts, saying where they first differ;
    ``needs``: what needs them aligned, for the sentence ("patching", "comparing them")."""
    if len(clean_ids) == len(corrupted_ids):
        return
    first = next((i for i, (a, b) in enumerate(zip(clean_ids, corrupted_ids)) if a != b),
                 min(len(clean_ids), len(corrupted_ids)))
    def tok(ids):  # as the app shows tokens ('␣store', not the byte-level 'Ġstore')
        if first >= len(ids):
            return "the end"
        return loaded.family.display_tokens(loaded.tokenizer, loaded.tokenizer.convert_ids_to_tokens([ids[first]]))[0]

    where = f"token {first}: {tok(clean_ids)!r} vs {tok(corrupted_ids)!r}"
    raise InputError(f"The clean prompt has {len(clean_ids)} tokens and the corrupted one {len(corrupted_ids)}: {needs} "
                     f"needs them aligned token for token (they first differ at {where}); reword one so both "
                     "tokenize to the same length.")


@dataclass(frozen=True)
class PatchingResult:
    metric: str  # logit_diff, logprob, loss
    metric_label: str
    what: str
    denoising: bool
    clean: float  # the metric of the clean run
    corrupted: float  # the metric of the corrupted run
    patched: np.ndarray  # the metric of each patched run: heads (L, H), head_positions (L, H, n), resid (L, n),
    #                      layers (L, 2) [attention, mlp]; NaN where a cancelled run did not reach
    effect: np.ndarray  # (patched − corrupted) / (clean − corrupted), the same shape
    n_tokens: int
    position: int  # the position read (logit_diff, logprob), n − 1 by default
    done: np.ndarray | None = None  # patched's shape, bool: the patches finished (None: all)

    def __post_init__(self):
        for a in (self.patched, self.effect) + (() if self.done is None else (self.done,)):
            a.setflags(write=False)

    @property
    def partial(self) -> bool:
        return self.done is not None and not bool(self.done.all())

    def top(self, k: int = 5) -> list[tuple[tuple[int, ...], float]]:
        """The k patches of largest effect: (index, effect), NaN never."""
        flat = np.nan_to_num(self.effect, nan=-np.inf).ravel()
        order = [i for i in np.argsort(-flat, kind="stable")[:k] if np.isfinite(flat[i])]
        return [(tuple(int(j) for j in np.unravel_index(i, self.effect.shape)), float(flat[i])) for i in order]

    def to_dict(self) -> dict:
        """``{"metric", "metric_label", "clean", "corrupted", "what", "denoising", "position", "n_tokens",
        "effect", "patched"}`` (JSON-able; NaN as None by the writer)."""
        return {"metric": self.metric, "metric_label": self.metric_label, "clean": self.clean,
                "corrupted": self.corrupted, "what": self.what, "denoising": self.denoising, "position": self.position,
                "n_tokens": self.n_tokens, "effect": self.effect.tolist(), "patched": self.patched.tolist(),
                **({"layer_parts": ["attention", "mlp"]} if self.what == "layers" else {})}


@dataclass
class _Run:
    """One prompt's cached run: its stream (block inputs, the last block's output), each layer's z and attention
    output (torch, batch 1)."""

    stream: object
    z: dict
    attn: dict
    final: object  # (1, n, d) the last block's output


def _cached(loaded, ids: list[int]) -> _Run:
    from ..run.resume import cache_stream

    z, attn, final = {}, {}, {}
    stream = cache_stream(loaded, ids, head_inputs=z, attention_outputs=attn, final=final)
    return _Run(stream, z, attn, final["out"])


def patch(loaded, clean_ids: list[int], corrupted_ids: list[int], metric: Metric, what: What = "heads",
          denoising: bool = True, progress: ProgressCallback | None = None,
          cancel: threading.Event | None = None, layers: int | None = None) -> PatchingResult:
    """Activation patching of ``what`` between the two prompts (module docstring). ``progress(done, total)`` counts
    patches; setting ``cancel`` stops with AnalysisCancelled whose ``partial`` holds the finished layers.
    ``layers``: patch only layers 0 … layers − 1 (the others NaN, ``done`` False there): the map a run cancelled after
    that many layers showed, for a snippet that reproduces it."""
    import torch

    from ..run.resume import decode, edited, run_block
    from .ablation import _decoded_losses

    if what not in WHAT:
        raise InputError(f"Unknown patching target '{what}': use {', '.join(WHAT)}.")
    if not loaded.family.causal or loaded.model.get_output_embeddings() is None:
        raise InputError("Patching reads the next-token logits, so it needs a decoder with a language-model head.")
    pair_ids(loaded, clean_ids, corrupted_ids)
    n = len(clean_ids)
    if not -n <= metric.position < n:
        raise InputError(f"Position {metric.position} is outside the prompts' {n} tokens (0 … {n - 1}).")
    position = metric.position % n
    L, H, dk = loaded.n_layer, loaded.n_head, loaded.d_head
    if layers is not None and not 1 <= layers <= L:
        raise InputError(f"layers={layers} is outside the model's 1 … {L} layers.")
    clean, corrupted = _cached(loaded, clean_ids), _cached(loaded, corrupted_ids)
    base, source = (corrupted, clean) if denoising else (clean, corrupted)

    def score(x):  # (R, n, d) after the last block → (R,) the metric
        if metric.kind == "loss":
            return -_decoded_losses(loaded, x, clean_ids)
        return metric.of_logits(decode(loaded, x[:, position]))

    m_clean, m_corrupted = float(score(clean.final)[0]), float(score(corrupted.final)[0])
    if not abs(m_clean - m_corrupted) > 1e-6 * max(1.0, abs(m_clean)):
        raise InputError(f"The clean and corrupted prompts give the same {metric.label} ({m_clean:.4g}): there is "
                         "no difference for a patch to restore; pick prompts (or answers) the model tells apart.")

    shape = {"heads": (L, H), "head_positions": (L, H, n), "resid": (L, n), "layers": (L, 2)}[what]
    patched = np.full(shape, np.nan)
    done = np.zeros(shape, dtype=bool)
    total = int(np.prod(shape))
    rows_cap = max(1, STREAM_TOKENS // n)

    def rows_from(layer: int, x, edits=None, outputs=None) -> np.ndarray:
        """Blocks ``layer`` … L−1 on the rows ``x`` (R, n, d), ``rows_cap`` at a time, then the metric."""
        values = []
        for r in range(0, x.shape[0], rows_cap):
            with edited(loaded, edits and {layer: edits(r, min(x.shape[0], r + rows_cap))},
                        outputs and {layer: outputs}):
                h = x[r:r + rows_cap]
                for l in range(layer, L):
                    h = run_block(loaded, base.stream, l, h)
                values.append(score(h))
        return np.concatenate(values)

    def head_rows(layer: int, cells: list[tuple[int, int | None]]):
        """An edit for rows ``cells`` [(head, position or None: every position)], each taking its head's z from the
        source run (at its position only, or everywhere)."""
        src = source.z[layer].view(1, n, H, dk)[0]  # (n, H, dk)

        def edits(r0, r1):
            def swap(merged):
                R = merged.shape[0]
                out = merged.clone().view(R, n, H, dk)
                for b, (head, pos) in enumerate(cells[r0:r1]):
                    if pos is None:
                        out[b, :, head] = src[:, head]
                    else:
                        out[b, pos, head] = src[pos, head]
                return out.view(R, n, H * dk)
            return swap
        return edits

    try:
        with torch.inference_mode():
            for layer in range(L if layers is None else layers):
                if cancel is not None and cancel.is_set():
                    raise AnalysisCancelled("Patching cancelled.")
                x_l = base.stream.inputs[layer]
                if what in ("heads", "head_positions"):
                    cells = ([(h, None) for h in range(H)] if what == "heads"
                             else [(h, p) for h in range(H) for p in range(n)])
                    values = rows_from(layer, x_l.expand(len(cells), -1, -1), edits=head_rows(layer, cells))
                    patched[layer] = values.reshape(shape[1:])
                elif what == "resid":
                    x = x_l.expand(n, -1, -1).clone()
                    x[torch.arange(n), torch.arange(n)] = source.stream.inputs[layer][0]
                    patched[layer] = rows_from(layer, x)
                else:
                    src_attn = source.attn[layer]
                    patched[layer, 0] = rows_from(layer, x_l, outputs=lambda _out, s=src_attn: s)[0]
                    after = base.stream.inputs[layer + 1] if layer + 1 < L else base.final
                    src_after = source.stream.inputs[layer + 1] if layer + 1 < L else source.final
                    mlp_base = after - x_l - base.attn[layer]
                    mlp_src = src_after - source.stream.inputs[layer] - source.attn[layer]
                    patched[layer, 1] = rows_from(layer + 1, after - mlp_base + mlp_src)[0]
                done[layer] = True
                if progress:
                    progress(int(done.sum()), total)
    except BaseException as exc:  # Cancel seen between layers, or the worker's interrupt of a forward in flight
        if isinstance(exc, AnalysisCancelled) or (cancel is not None and cancel.is_set()):
            kept = _result(metric, what, denoising, m_clean, m_corrupted, patched, n, position, done) if done.any() else None
            layers = int(done.reshape(L, -1)[:, 0].sum())
            raise AnalysisCancelled(f"Patching cancelled after {layers} of {L} layers.", partial=kept) from exc
        raise
    return _result(metric, what, denoising, m_clean, m_corrupted, patched, n, position,
                   None if layers is None or layers == L else done)


def _result(metric, what, denoising, m_clean, m_corrupted, patched, n, position, done) -> PatchingResult:
    values = patched.copy()
    effect = (values - m_corrupted) / (m_clean - m_corrupted)
    return PatchingResult(metric.kind, metric.label, what, denoising, m_clean, m_corrupted, values, effect, n,
                          position, None if done is None else done.copy())
