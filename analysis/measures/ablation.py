"""Ablating heads: does this head matter for the next-token prediction on this text?

Head h of layer l outputs ``z_h = A_h · V_h`` (n, dk) — its softmax weights times its values, before
the heads are merged and projected by W_O. The layer writes ``Σ_h z_h W_O^h + b_O`` into the
residual stream. Ablation replaces z_h at every position by

- ``"zero"``: 0 — the head writes nothing;
- ``"mean"``: its mean over the positions of this text, ``z̄_h = (1/n) Σ_i z_h[i]`` — the head writes
  the same average vector everywhere, so only what it does *differently per position* is removed.

Measured before and after: the text's next-token loss, the mean over positions t = 1 … n−1 of
``−log p(tok[t] | tok[0 … t−1])`` (natural log, the model's full softmax), and the top-5 next tokens
after the last position.

How, through the LoadedModel's family adapter (``loaded.family``, any decoder family): the one forward
(``run.capture.forward``) is given an edit of the family's output module (W_O) that replaces head h's slice
of its input — the heads' outputs side by side, (n, H·dk) — by z̃_h. Tested against independent hooks that
recompute z_h = A_h V_h from the attention module's own weights and values. Decoders only.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Literal

import numpy as np

from ..display import head_name
from ..errors import AnalysisCancelled, InputError

AblationMode = Literal["zero", "mean"]
MODES: tuple[str, ...] = ("zero", "mean")
TOP_K = 5

ProgressCallback = Callable[[int, int], None]  # (done, total)


# ----------------------------------------------------------------------------- where the heads are
class _FamilyHeads:
    """Any decoder family, through its adapter: the output module's input is the heads' outputs side by side."""

    def __init__(self, model, family):
        if not family.causal:
            raise InputError(f"Ablation measures the next-token loss, so it needs a decoder; this model "
                             f"({family.title or family.name}) is an encoder. Load a decoder (GPT-2, Llama, …).")
        if model.get_output_embeddings() is None:
            raise InputError("Ablation measures the next-token loss, so it needs a language-model head; "
                             "this model has none.")
        shape = family.shape(model.config)
        self.n_head, self.d_head = shape.n_head, shape.d_head

    def edit(self, heads: list[int], mode: str):
        """What W_O is given instead of the heads' outputs, with ``heads`` ablated (an edit of ``capture.forward``)."""
        H, dk = self.n_head, self.d_head

        def ablated(merged):
            B, n, _ = merged.shape  # (B, n, H·dk): the heads' outputs side by side, before W_O
            edited = merged.clone().view(B, n, H, dk)  # (B, n, H, dk)
            for h in heads:
                edited[:, :, h] = 0 if mode == "zero" else merged.view(B, n, H, dk)[:, :, h].mean(dim=1, keepdim=True)
            return edited.view(B, n, H * dk)

        return ablated

    def edit_last_rows(self, mode: str):
        """An edit for a batch whose last H rows are each ablated at their own head: row B − H + h loses head h
        (the rows before them pass unchanged: the importance map's staircase)."""
        H, dk = self.n_head, self.d_head

        def ablated(merged):
            B, n, _ = merged.shape  # (B, n, H·dk), B ≥ H
            heads_out = merged[B - H:].view(H, n, H, dk)
            edited = merged.clone()
            new = edited[B - H:].view(H, n, H, dk)
            for h in range(H):
                new[h, :, h] = 0 if mode == "zero" else heads_out[h, :, h].mean(dim=0, keepdim=True)
            return edited

        return ablated


def heads_site(loaded):
    """Where ``loaded``'s heads can be ablated: its family adapter's output modules (an encoder is refused)."""
    return _FamilyHeads(loaded.model, loaded.family)


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Outcome:
    """The model's next-token behaviour on the text."""

    loss: float  # mean NLL over positions 1 … n−1, nats
    top: tuple[tuple[str, float], ...]  # top-5 next tokens after the last position: (display token, probability)

    def to_dict(self) -> dict:
        return {"loss": self.loss, "top": [[token, p] for token, p in self.top]}


@dataclass(frozen=True)
class AblationResult:
    mode: str
    heads: tuple[tuple[int, int], ...]
    baseline: Outcome
    ablated: Outcome
    n_tokens: int  # tokens run and measured (BOS included): the loss averages over n_tokens − 1 predictions
    truncated: bool  # the text was longer than the context (or the token cap) and only its start was run
    warnings: tuple[str, ...] = ()  # sentences for the user (a byte-order mark removed, the text cut)

    @property
    def loss_change(self) -> float:
        return self.ablated.loss - self.baseline.loss

    def to_dict(self) -> dict:
        """``{"mode", "heads": [[l, h], ...], "head_names": ["L1H0", ...], "n_tokens", "truncated",
        "baseline": {"loss", "top"}, "ablated": {...}}`` (JSON-able)."""
        return {"mode": self.mode, "heads": [[l, h] for l, h in self.heads],
                "head_names": [head_name(l, h) for l, h in self.heads], "n_tokens": self.n_tokens,
                "truncated": self.truncated, "baseline": self.baseline.to_dict(), "ablated": self.ablated.to_dict()}


@dataclass(frozen=True)
class ImportanceMap:
    """Loss change when each head alone is ablated. Arrays (layer, head), read-only.

    A map cancelled part way (``partial``) holds NaN for the heads not measured; ``done`` says which were."""

    mode: str
    baseline_loss: float
    ablated_loss: np.ndarray  # (L, H) nats
    loss_change: np.ndarray  # (L, H) ablated − baseline, nats: > 0 means the head helps on this text
    n_tokens: int  # tokens run (BOS included)
    truncated: bool  # only the start of a longer text was run
    warnings: tuple[str, ...] = ()  # sentences for the user (a byte-order mark removed, the text cut)
    done: np.ndarray | None = None  # (L, H) bool: the heads measured; None: every head

    @property
    def partial(self) -> bool:
        return self.done is not None and not bool(self.done.all())

    @property
    def n_done(self) -> int:
        return int(self.loss_change.size if self.done is None else self.done.sum())

    def top(self, k: int = 5) -> list[tuple[int, int, float]]:
        """The k heads whose ablation raises the loss most: (layer, head, loss change); unmeasured heads never."""
        order = np.argsort(-np.nan_to_num(self.loss_change, nan=-np.inf), axis=None)[:k]
        order = [i for i in order if np.isfinite(self.loss_change.flat[i])]
        return [(int(i // self.loss_change.shape[1]), int(i % self.loss_change.shape[1]),
                 float(self.loss_change.flat[i])) for i in order]


# ----------------------------------------------------------------------------- running
_HEAD = re.compile(r"([0-9]+)\.([0-9]+)|[Ll]([0-9]+)[Hh]([0-9]+)", re.ASCII)  # LAYER.HEAD or L1H0, ASCII digits


def parse_head_list(spec: str) -> list[tuple[int, int]]:
    """The syntax of ``--heads``, before any model is loaded: ``"1.0, 1.3"`` → [(1, 0), (1, 3)].

    Each comma-separated item is LAYER.HEAD or, as the app names heads, L1H0 (ASCII digits; spaces around an item
    are allowed, inside it are not; no sign, no ``_``); an empty item, or a head named twice, is an InputError
    naming it.
    Whether the heads exist is :func:`parse_heads`'s question, once the model is known."""
    if spec is None or not spec.strip():
        raise InputError("No heads given: name at least one as LAYER.HEAD, e.g. 1.0,1.3")
    heads: list[tuple[int, int]] = []
    for k, item in enumerate(spec.split(",")):
        part = item.strip()
        if not part:
            raise InputError(f"Head {k + 1} of '{spec}' is empty: write heads as LAYER.HEAD separated by single "
                             "commas, e.g. 1.0,1.3")
        match = _HEAD.fullmatch(part)
        if match is None:
            raise InputError(f"'{part}' is not a head: write heads as LAYER.HEAD (or L1H0) with the digits 0–9, "
                             "e.g. 1.0,1.3")
        layer, head_no = (match[1], match[2]) if match[1] is not None else (match[3], match[4])
        head = (int(layer), int(head_no))
        if head in heads:
            raise InputError(f"{head_name(*head)} is named twice in '{spec}': name each head once.")
        heads.append(head)
    return heads


def parse_one_head(spec: str) -> tuple[int, int]:
    """One head, as :func:`parse_head_list` reads it (``"3.1"`` or ``"L3H1"`` → (3, 1)); an InputError for a list."""
    heads = parse_head_list(spec)
    if len(heads) != 1:
        raise InputError(f"'{spec}' names {len(heads)} heads: name one, as LAYER.HEAD or L3H1, e.g. 3.1")
    return heads[0]


def parse_heads(spec: str, n_layer: int, n_head: int) -> list[tuple[int, int]]:
    """``"1.0,1.3"`` → [(1, 0), (1, 3)], checked against the model's layers and heads; an InputError
    naming the bad part otherwise (the syntax as :func:`parse_head_list` reads it)."""
    return check_heads(parse_head_list(spec), n_layer, n_head)


def check_heads(heads: Iterable[tuple[int, int]], n_layer: int, n_head: int) -> list[tuple[int, int]]:
    """``heads`` as (layer, head) pairs of a model of ``n_layer`` × ``n_head`` heads, in the order given, each once
    (none for none); an InputError naming the first that does not exist ("L3H0 does not exist: …")."""
    out = []
    for layer, head in heads:
        if not (0 <= layer < n_layer and 0 <= head < n_head):
            raise InputError(f"{head_name(layer, head)} does not exist: the model has layers 0–{n_layer - 1} "
                             f"and heads 0–{n_head - 1}.")
        if (int(layer), int(head)) not in out:
            out.append((int(layer), int(head)))
    return out


@dataclass(frozen=True)
class TextTokens:
    """What of a text ablation runs: the ids (BOS included where used), whether the text was cut, and the
    sentences to show (a byte-order mark removed, the text cut)."""

    ids: tuple[int, ...]
    truncated: bool  # longer than the model's context (or the token cap): only its first tokens are run
    warnings: tuple[str, ...] = ()

    @property
    def n_tokens(self) -> int:
        return len(self.ids)


def text_tokens(loaded, text: str, bos: bool | None = None, max_tokens: int | None = None,
                chat: bool = False) -> TextTokens:
    """``text`` tokenised as :func:`ablate` and :func:`importance_map` run it: a leading byte-order mark
    removed and the text cut to the model's context or ``max_tokens`` exactly as ``run_text`` does, with
    the same sentences; with ``chat``, as one user turn of the model's chat template (``bos`` not used), as
    ``run_text(chat=True)`` runs it. Fewer than 2 tokens is an InputError: there is no next-token loss to measure."""
    from ..run.inference import bos_used
    from ..run.tokenize import token_limit, tokenize, truncation_warning, without_bom

    text, warnings = without_bom(text)
    use_bos = False if chat else bos_used(loaded, bos)
    ids, _, cut = tokenize(loaded, text, use_bos, max_tokens, chat=chat)
    if len(ids) < 2:
        if loaded.context_length < 2:
            raise InputError(f"This model's context holds only {loaded.context_length} position: a next-token loss "
                             "needs 2 tokens, so it cannot be measured on this model.")
        if cut:  # the text has more: the cap is what stops it
            cap = token_limit(loaded, max_tokens)
            raise InputError(f"A token cap of {cap} runs only {len(ids)} token{'' if len(ids) == 1 else 's'} of the "
                             "text, and a next-token loss needs 2; raise the cap (--max-tokens) to at least 2.")
        raise InputError("The text needs at least 2 tokens to measure a next-token loss; type a longer one.")
    if cut:
        warnings.append(truncation_warning(loaded, ids, use_bos, token_limit(loaded, max_tokens),
                                           "run: the losses and the top-5 describe that part", chat=chat))
    return TextTokens(tuple(ids), cut, tuple(warnings))


def _tokens(loaded, text: str | TextTokens, bos: bool | None, max_tokens: int | None, chat: bool) -> TextTokens:
    return text if isinstance(text, TextTokens) else text_tokens(loaded, text, bos, max_tokens, chat)


def _run(loaded, site, ids: list[int], heads: list[tuple[int, int]], mode: str) -> Outcome:
    """One forward (the one capture, nothing captured but the logits), with ``heads`` ablated (none: the
    baseline); its hooks are always removed."""
    import torch

    from ..run.capture import forward, not_finite
    from ..run.inference import _top_predictions

    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    _, logits = forward(loaded, [ids], parts=(), logits="all",
                        edits={layer: site.edit(hs, mode) for layer, hs in by_layer.items()})
    logits = logits[0].double()  # (n, vocab)
    if not bool(torch.isfinite(logits).all()):
        raise not_finite("logits" + (", with heads ablated" if heads else ""), loaded.dtype)
    targets = torch.tensor(ids[1:], device=logits.device)
    nll = -torch.log_softmax(logits[:-1], dim=-1).gather(1, targets[:, None])  # (n−1, 1)
    specials = frozenset(loaded.tokenizer.all_special_tokens)
    top = _top_predictions(logits[-1].cpu().numpy(), loaded, specials)
    return Outcome(float(nll.mean()), tuple((p.token, p.probability) for p in top[:TOP_K]))


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InputError(f"Unknown ablation mode '{mode}': use zero or mean.")
    return mode


def ablate(loaded, text: str | TextTokens, heads: Iterable[tuple[int, int]], mode: AblationMode = "zero",
           bos: bool | None = None, max_tokens: int | None = None, chat: bool = False) -> AblationResult:
    """Run ``text`` (or the :class:`TextTokens` of :func:`text_tokens`) with and without ``heads`` ablated;
    loss and top-5 next tokens for both. ``bos``, ``max_tokens`` and ``chat`` tokenise a text as
    :func:`text_tokens` does."""
    site = heads_site(loaded)
    mode = _check_mode(mode)
    chosen = check_heads(heads, loaded.n_layer, loaded.n_head)
    if not chosen:
        raise InputError("No heads to ablate: name at least one as LAYER.HEAD, e.g. 1.0")
    tokens = _tokens(loaded, text, bos, max_tokens, chat)
    ids = list(tokens.ids)
    return AblationResult(mode, tuple(chosen), _run(loaded, site, ids, [], mode),
                          _run(loaded, site, ids, chosen, mode), tokens.n_tokens, tokens.truncated, tokens.warnings)


#: At most this many tokens (rows × n) of residual stream go through the blocks at once in the importance map.
STREAM_TOKENS = 2048
#: At most this many tokens (rows × n) are decoded at once: their logits are rows × n × vocab floats.
DECODE_TOKENS = 1024


def _decoded_losses(loaded, x, ids: list[int]) -> np.ndarray:
    """The mean next-token NLL (nats) of each residual stream ``x`` (R, n, d) after the last block:
    −mean_t log softmax(logits[t])[ids[t+1]] with logits = unembedding(final norm(x)), as logsumexp − the next
    token's logit, accumulated in float32 and averaged in float64; decoded :data:`DECODE_TOKENS` at a time into one
    reused logits buffer, in place: a fresh R × n × vocab array is mostly page faults on a small machine."""
    import torch

    model = loaded.model
    unembed = model.get_output_embeddings()
    weight, bias = unembed.weight, getattr(unembed, "bias", None)  # (vocab, d), (vocab,) or None
    R, n, _ = x.shape
    normed = loaded.family.final_norm(model)(x[:, :-1]).reshape(R * (n - 1), -1)  # (R·(n−1), d)
    targets = torch.tensor(ids[1:], device=x.device).repeat(R)
    nll = torch.empty(R * (n - 1), dtype=torch.float32, device=x.device)
    step = max(1, DECODE_TOKENS)
    buffer = torch.empty((min(step, normed.shape[0]), weight.shape[0]), dtype=weight.dtype, device=x.device)
    for i in range(0, normed.shape[0], step):
        h = normed[i:i + step]
        logits = buffer[: h.shape[0]]
        if bias is None:
            torch.mm(h, weight.T, out=logits)
        else:
            torch.addmm(bias, h, weight.T, out=logits)
        picked = logits.gather(1, targets[i:i + step, None])[:, 0]
        top = logits.amax(dim=-1, keepdim=True)
        logits.sub_(top).exp_()
        nll[i:i + step] = top[:, 0] + logits.sum(dim=-1).log() - picked
    return nll.view(R, n - 1).double().mean(dim=1).cpu().numpy()


def importance_map(loaded, text: str | TextTokens, mode: AblationMode = "zero", bos: bool | None = None,
                   progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
                   max_tokens: int | None = None, chat: bool = False, group: int | None = None) -> ImportanceMap:
    """Loss change when each head alone is ablated, from one cached run (``run.resume``):

    the text runs once, keeping each block's input. Nothing before layer l changes when a head of layer l is
    ablated, so its rows start at block l from that cached input. The rows go as a *staircase*: for a group of
    ``group`` layers g … g+k−1, block g runs on H rows (row h ablates head h of layer g), at block g+1 the H rows
    of layer g+1 join them (their own heads ablated there), and so on; after the group's last layer every row
    runs on to the last block, and is decoded (final norm, unembedding, loss) :data:`DECODE_TOKENS` at a time.
    Each row thus runs exactly the blocks from its own layer on (the truncation), in batches of up to k·H rows.
    ``group`` (default: as many layers as fit :data:`STREAM_TOKENS`) trades speed for how often finished heads
    come in. Equal to one whole forward per head (:func:`importance_map_by_forwards`) to float32 round-off.

    ``progress(done, total)`` counts heads finished (+1 for the baseline run), after each group; setting
    ``cancel`` stops with AnalysisCancelled whose ``partial`` is the map of the heads finished (whole groups).
    ``bos``, ``max_tokens`` and ``chat`` tokenise a text as :func:`text_tokens` does.
    """
    import torch

    from ..run.capture import not_finite
    from ..run.resume import cache_stream, edited, run_block

    site = heads_site(loaded)
    mode = _check_mode(mode)
    tokens = _tokens(loaded, text, bos, max_tokens, chat)
    ids, n = list(tokens.ids), tokens.n_tokens
    L, H = loaded.n_layer, loaded.n_head
    total = L * H + 1
    group = max(1, min(L, group or STREAM_TOKENS // (n * H)))
    final: dict = {}
    stream = cache_stream(loaded, ids, final=final)
    baseline = float(_decoded_losses(loaded, final["out"], ids)[0])
    if progress:
        progress(1, total)
    ablated = np.full((L, H), np.nan)
    done = np.zeros((L, H), dtype=bool)

    def result(finished: np.ndarray | None) -> ImportanceMap:
        values = ablated.copy()
        change = values - baseline
        for a in (values, change) + (() if finished is None else (finished,)):
            a.setflags(write=False)
        return ImportanceMap(mode, baseline, values, change, tokens.n_tokens, tokens.truncated, tokens.warnings,
                             finished)

    def cancelled(cause=None):
        message = f"Importance map cancelled after {int(done.sum())} of {L * H} heads."
        raise AnalysisCancelled(message, partial=result(done.copy()) if done.any() else None) from cause

    try:
        for first in range(0, L, group):
            if cancel is not None and cancel.is_set():
                cancelled()
            layers = range(first, min(L, first + group))
            x = None
            with edited(loaded, {layer: site.edit_last_rows(mode) for layer in layers}):
                for layer in range(first, L):
                    if layer in layers:  # this layer's H rows join the staircase
                        new = stream.inputs[layer].expand(H, -1, -1)
                        x = new if x is None else torch.cat([x, new])
                    x = run_block(loaded, stream, layer, x)
                losses = _decoded_losses(loaded, x, ids)
            if not np.isfinite(losses).all():
                raise not_finite("logits, with heads ablated", loaded.dtype)
            ablated[layers.start:layers.stop] = losses.reshape(len(layers), H)
            done[layers.start:layers.stop] = True
            if progress:
                progress(1 + int(done.sum()), total)
    except AnalysisCancelled:
        raise
    except BaseException as exc:  # the worker's interrupt of a forward in flight, when Cancel was pressed
        if cancel is not None and cancel.is_set():
            cancelled(exc)
        raise
    return result(None)


def importance_map_by_forwards(loaded, text: str | TextTokens, mode: AblationMode = "zero", bos: bool | None = None,
                               max_tokens: int | None = None, chat: bool = False,
                               heads: Iterable[tuple[int, int]] | None = None) -> ImportanceMap:
    """The importance map the plain way: one whole forward per head (plus the baseline), for the tests and the
    benchmark to measure :func:`importance_map` against. ``heads``: only these (the others NaN)."""
    site = heads_site(loaded)
    mode = _check_mode(mode)
    tokens = _tokens(loaded, text, bos, max_tokens, chat)
    ids = list(tokens.ids)
    L, H = loaded.n_layer, loaded.n_head
    chosen = [(l, h) for l in range(L) for h in range(H)] if heads is None else list(heads)
    baseline = _run(loaded, site, ids, [], mode).loss
    ablated = np.full((L, H), np.nan)
    for layer, head in chosen:
        ablated[layer, head] = _run(loaded, site, ids, [(layer, head)], mode).loss
    change = ablated - baseline
    ablated.setflags(write=False)
    change.setflags(write=False)
    return ImportanceMap(mode, baseline, ablated, change, tokens.n_tokens, tokens.truncated, tokens.warnings)
