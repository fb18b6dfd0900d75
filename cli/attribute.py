"""``attnscope attribute``: direct logit attribution of one position (decoders), as JSON."""
from __future__ import annotations

from pathlib import Path

from .inputs import load_model_of, one_text, text_ids
from .output import compact_json
from .signals import Signals, stopped


def cmd_attribute(args) -> int:
    return stopped(args, lambda signals: _attribute(args, signals))


def _attribute(args, signals: Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.folders import write_file_atomically
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
        signals.deferred = True  # the file is written whole, then the command ends
        write_file_atomically(args.json, lambda tmp: Path(tmp).write_text(out + "\n", encoding="utf-8"))
    print(out)
    return 0
