"""The logit lens (nostalgebraist 2020): what the model would predict if it stopped after block l.

The residual stream after block l at position t, r_l[t] (d,), is decoded as the model decodes its last one:

    p_l[t] = softmax(W_U · norm_f(r_l[t]) + b_U)          (vocab,)

norm_f the model's final norm (LayerNorm or RMSNorm, applied afresh to each r_l[t]: not frozen), W_U / b_U the
unembedding. Row l = L − 1 is the model's own prediction (its logits). Per layer and position:

- ``top``: argmax_v p_l[t][v], the token the lens reads, and ``prob``: its probability p_l[t][top];
- ``final_rank``: the rank of the model's own prediction (the last row's top token at t) in p_l[t], 0 = top
  (ties counted against it: rank = #{v : p_l[t][v] > p_l[t][final]}).

And per position, ``surprisal[t] = −ln p_{L−1}[t][tok[t + 1]]`` (natural log), the loss of each actual next
token; the last position has no next token (NaN). Decoders only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LogitLens:
    token_ids: tuple[int, ...]
    top: np.ndarray  # (L, n) int64 the lens's top token id per layer and position
    prob: np.ndarray  # (L, n) float64 its probability
    final_rank: np.ndarray  # (L, n) int64 the rank of the model's own prediction, 0 = top
    surprisal: np.ndarray  # (n,) float64 −ln p(next token), NaN at the last position

    def __post_init__(self):
        for a in (self.top, self.prob, self.final_rank, self.surprisal):
            a.setflags(write=False)

    def first_layer_on_top(self, token: int, position: int = -1) -> int | None:
        """The first layer whose lens reads ``token`` as the top token at ``position`` (None: none does)."""
        hits = np.flatnonzero(self.top[:, position] == token)
        return int(hits[0]) if hits.size else None


def logit_lens(loaded, ids: list[int]) -> LogitLens:
    """The logit lens of the text ``ids`` (one forward; each block's output read by a forward hook)."""
    import torch

    family, model = loaded.family, loaded.model
    blocks = family.blocks(model)
    residuals: dict[int, object] = {}
    handles = []

    def keep(layer):
        def hook(module, args, output):
            residuals[layer] = (output[0] if isinstance(output, tuple) else output)[0].detach()
        return hook

    try:
        for layer, block in enumerate(blocks):
            handles.append(block.register_forward_hook(keep(layer)))
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=model.device), **family.forward_kwargs()).logits[0]
    finally:
        for h in handles:
            h.remove()
    norm, unembed = family.final_norm(model), model.get_output_embeddings()
    L, n = len(blocks), len(ids)
    top = np.zeros((L, n), np.int64)
    prob = np.zeros((L, n))
    rank = np.zeros((L, n), np.int64)
    final = logits.float().argmax(-1)  # (n,) the model's own prediction
    with torch.no_grad():
        for layer in range(L):  # one layer's (n, vocab) at a time
            lg = logits.float() if layer == L - 1 else unembed(norm(residuals[layer][None]))[0].float()
            p = torch.softmax(lg.double(), -1)
            best = p.max(-1)
            top[layer], prob[layer] = best.indices.cpu().numpy(), best.values.cpu().numpy()
            own = p.gather(-1, final[:, None])
            rank[layer] = (p > own).sum(-1).cpu().numpy()
        logp = torch.log_softmax(logits.double(), -1)
        surprisal = np.full(n, np.nan)
        if n > 1:
            nxt = torch.tensor(ids[1:], device=logp.device)[:, None]
            surprisal[:-1] = (-logp[:-1].gather(-1, nxt))[:, 0].cpu().numpy()
    return LogitLens(tuple(int(i) for i in ids), top, prob, rank, surprisal)
