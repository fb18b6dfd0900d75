"""``attnscope attribute``: direct logit attribution of one position (decoders), as JSON."""
from __future__ import annotations

from .inputs import load_model_of, one_text, text_ids
from .output import compact_json, save_text
from .signals import Signals, stopped


def cmd_attribute(args) -> int:
    return stopped(args, lambda signals: _attribute(args, signals))


def _attribute(args, signals: Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.writers import _json_safe
    from analysis.measures import ablation, attribution

    text = one_text(args)
    loaded = load_model_of(args)
    ablation.heads_site(loaded)  # an encoder is refused: it has no next-token logits to attribute
    answer = attribution.single_token(loaded, args.answer, "answer")
    wrong = None if args.wrong is None else attribution.single_token(loaded, args.wrong, "wrong answer")
    if wrong is not None and wrong == answer:
        raise InputError(f"The answer and the wrong answer are the same token ({args.answer!r}): the logit "
                         "difference would be 0.")
    ids, cut = text_ids(loaded, text, args, "run: the attribution describes that part")
    result = attribution.attribute(loaded, ids, answer, wrong, args.position)
    data = {"n_tokens": len(ids), "truncated": cut, **result.to_dict()}
    out = compact_json(_json_safe(data))
    if args.json is not None:
        save_text(args.json, out, signals)
    print(out)
    return 0
