"""Direct logit attribution: what each component writes into the residual stream, read by the unembedding.

At position p the residual stream entering the final norm is exactly the sum of what was written into it:

    r = e + Σ_l (Σ_h z_h^l W_O^{l,h} + b_O^l) + Σ_l m_l          (d,)

e: the embeddings (token + position; the first block's input); z_h^l W_O^{l,h}: head h of layer l, its
(dk,) output times its rows of W_O; b_O^l: the attention output bias; m_l: the MLP's output, measured as
block output − block input − attention output (so a parallel residual, NeoX, is covered too).
The final norm is frozen at this run's value: LayerNorm c ↦ γ (c − mean(c)) / σ, σ = √(var(r) + ε);
RMSNorm c ↦ γ c / √(mean(r²) + ε). Each component c then scores ``(γ-normed c) · (W_U[answer] − W_U[wrong])``
(W_U[answer] alone without a wrong token); the norm's β and the unembedding's bias go to ``biases``.
The metric is logit(answer) − logit(wrong) from the model's own logits; ``residual_error`` = metric − Σ of all
components. With the scale frozen the split is exact (residual_error is float round-off); what is approximated
is the norm's scale: each component is divided by the *whole* residual's σ, not by what it would have alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class Attribution:
    metric: str  # "logit(' Mary') − logit(' John')"
    position: int  # the position read
    value: float  # the metric from the model's logits
    heads: np.ndarray  # (L, H) each head's direct contribution, logits
    mlps: np.ndarray  # (L,)
    embeddings: float
    biases: float  # attention output biases, the final norm's β, the unembedding bias
    residual_error: float  # value − (heads + mlps + embeddings + biases)

    def __post_init__(self):
        for a in (self.heads, self.mlps):
            a.setflags(write=False)

    def to_dict(self) -> dict:
        return {"metric": self.metric, "position": self.position, "value": self.value,
                "heads": self.heads.tolist(), "mlps": self.mlps.tolist(), "embeddings": self.embeddings,
                "biases": self.biases, "residual_error": self.residual_error}


def single_token(loaded, text: str, what: str) -> int:
    """The id of ``text`` (typed with its leading space, " Mary"), which must be one token."""
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        # as the app shows tokens ('␣We', not the byte-level 'ĠWe', which reads as a G)
        pieces = loaded.family.display_tokens(loaded.tokenizer, loaded.tokenizer.convert_ids_to_tokens(ids))
        raise InputError(f"The {what} {text!r} must be a single token; it tokenizes as {len(ids)}: "
                         f"{', '.join(repr(p) for p in pieces)}.")
    return int(ids[0])


def attribute(loaded, ids: list[int], answer: int, wrong: int | None = None, position: int | None = None) -> Attribution:
    """Direct logit attribution of ``ids`` at ``position`` (default the last) for answer/wrong token ids."""
    import torch

    family, model = loaded.family, loaded.model
    n = len(ids)
    p = n - 1 if position is None else position
    if not -n <= p < n:
        raise InputError(f"Position {position} is outside the text's {n} tokens (0 … {n - 1}).")
    p %= n
    blocks = family.blocks(model)
    got: dict = {}
    handles = []

    def pre(layer):
        def hook(module, args, kwargs):
            got[("in", layer)] = (args[0] if args else kwargs["hidden_states"])[0, p].double()
        return hook

    def post(layer):
        def hook(module, args, output):
            got[("out", layer)] = (output[0] if isinstance(output, tuple) else output)[0, p].double()
        return hook

    def z(layer):
        def hook(module, args):
            got[("z", layer)] = args[0][0, p].double()  # (H·dk,) the heads side by side, before W_O
        return hook

    def attn_out(layer):
        def hook(module, args, output):
            got[("a", layer)] = (output[0] if isinstance(output, tuple) else output)[0, p].double()
        return hook

    try:
        for layer, block in enumerate(blocks):
            handles += [block.register_forward_pre_hook(pre(layer), with_kwargs=True),
                        block.register_forward_hook(post(layer)),
                        family.output_module(block).register_forward_pre_hook(z(layer)),
                        family.output_module(block).register_forward_hook(attn_out(layer))]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=model.device), **family.forward_kwargs()).logits
    finally:
        for h in handles:
            h.remove()
    logits = logits[0, p].double()
    L, H, dk = loaded.n_layer, loaded.n_head, loaded.d_head
    norm = family.final_norm(model)
    gamma = norm.weight.double()
    beta = norm.bias.double() if getattr(norm, "bias", None) is not None else None
    eps = float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-5)))
    r = got[("out", L - 1)]
    layernorm = beta is not None or isinstance(norm, torch.nn.LayerNorm)
    scale = torch.sqrt(r.var(unbiased=False) + eps) if layernorm else torch.sqrt((r * r).mean() + eps)
    unembed = model.get_output_embeddings()
    w = unembed.weight.double()
    direction = w[answer] - (w[wrong] if wrong is not None else 0)  # (d,)
    ubias = unembed.bias.double() if unembed.bias is not None else None

    def read(c):  # (…, d) → (…,) the frozen norm then the direction
        c = c - c.mean(-1, keepdim=True) if layernorm else c
        return (c * gamma / scale) @ direction

    heads = np.zeros((L, H))
    mlps = np.zeros(L)
    bias = 0.0
    for layer, block in enumerate(blocks):
        wo = family.output_weight(block).double()  # (H·dk, d)
        per_head = got[("z", layer)].view(H, dk)[:, :, None] * wo.view(H, dk, -1)  # (H, dk, d)
        per_head = per_head.sum(1)  # (H, d)
        b_o = got[("a", layer)] - per_head.sum(0)  # the output bias (0 without one)
        heads[layer] = read(per_head).cpu().numpy()
        bias += float(read(b_o))
        mlps[layer] = float(read(got[("out", layer)] - got[("in", layer)] - got[("a", layer)]))
    embeddings = float(read(got[("in", 0)]))
    if beta is not None:
        bias += float(beta @ direction)
    if ubias is not None:
        bias += float(ubias[answer] - (ubias[wrong] if wrong is not None else 0))
    value = float(logits[answer] - (logits[wrong] if wrong is not None else 0))
    total = heads.sum() + mlps.sum() + embeddings + bias
    tok = lambda i: loaded.tokenizer.decode([i])  # the text as typed ( Mary), not the byte-level piece (ĠMary)
    metric = f"logit({tok(answer)!r})" + (f" − logit({tok(wrong)!r})" if wrong is not None else "")
    return Attribution(metric, p, value, heads, mlps, embeddings, bias, value - float(total))
