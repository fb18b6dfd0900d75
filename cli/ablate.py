"""``attnscope ablate``: the next-token loss and top-5 with heads ablated (decoders), as JSON."""
from __future__ import annotations

from .inputs import load_model_of, one_text
from .output import compact_json, count_progress, save_text, warn
from .signals import Signals, stopped


def cmd_ablate(args) -> int:
    return stopped(args, lambda signals: _ablate(args, signals))


def _ablate(args, signals: Signals) -> int:
    from analysis.display import head_name
    from analysis.errors import InputError
    from analysis.export.writers import _json_safe

    if not args.heads and not args.importance:
        raise InputError("Name the heads to ablate with --heads LAYER.HEAD,… (e.g. 1.0,1.3), or pass --importance.")
    text = one_text(args)
    from analysis.measures import ablation

    loaded = load_model_of(args)
    ablation.heads_site(loaded)  # an encoder is refused before the heads are read
    heads = ablation.parse_heads(args.heads, loaded.n_layer, loaded.n_head) if args.heads else None
    tokens = ablation.text_tokens(loaded, text, args.bos, args.max_tokens, args.chat)  # tokenised once, for both
    for warning in tokens.warnings:
        warn(warning)
    data: dict = {"mode": args.mode, "n_tokens": tokens.n_tokens, "truncated": tokens.truncated, "chat": args.chat}
    if heads:
        data.update(ablation.ablate(loaded, tokens, heads, args.mode).to_dict())
    if args.importance:
        importance = ablation.importance_map(loaded, tokens, args.mode, progress=count_progress("ablating each head"))
        data["importance"] = {"baseline_loss": importance.baseline_loss,
                              "top": [[layer, head, change] for layer, head, change in importance.top(5)],
                              "top_names": [head_name(layer, head) for layer, head, _ in importance.top(5)],
                              "loss_change": importance.loss_change.tolist()}
    out = compact_json(_json_safe(data))
    if args.json is not None:
        save_text(args.json, out, signals)
    print(out)
    return 0
