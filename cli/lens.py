"""``attnscope lens``: the logit lens, every layer's residual stream decoded at every position (decoders), as JSON."""
from __future__ import annotations

from .inputs import load_model_of, one_text, text_ids
from .output import compact_json, save_text
from .signals import Signals, stopped


def cmd_lens(args) -> int:
    return stopped(args, lambda signals: _lens(args, signals))


def _lens(args, signals: Signals) -> int:
    from analysis.export.writers import _json_safe
    from analysis.measures import ablation
    from analysis.measures.logit_lens import logit_lens

    text = one_text(args)
    loaded = load_model_of(args)
    ablation.heads_site(loaded)  # an encoder is refused: it predicts no next token
    ids, cut = text_ids(loaded, text, args, "run: the lens describes that part")
    lens = logit_lens(loaded, ids)
    decode = lambda i: loaded.tokenizer.decode([int(i)])  # noqa: E731 - the token as text (" Mary")
    data = {"n_tokens": len(ids), "truncated": cut, "tokens": [decode(i) for i in ids],
            "top": [[decode(i) for i in row] for row in lens.top], "top_ids": lens.top.tolist(),
            "prob": lens.prob.tolist(), "final_rank": lens.final_rank.tolist(),
            "surprisal": lens.surprisal.tolist()}
    out = compact_json(_json_safe(data))
    if args.json is not None:
        save_text(args.json, out, signals)
    print(out)
    return 0
