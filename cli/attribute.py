"""``attnscope attribute``: direct logit attribution of one position (decoders), as JSON."""
from __future__ import annotations

from pathlib import Path

from .inputs import check_apart, load_model_of, read_text_file
from .output import compact_json, warn
from .signals import Signals, stopped


def cmd_attribute(args) -> int:
    return stopped(args, lambda signals: _attribute(args, signals))


def _attribute(args, signals: Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.folders import write_file_atomically
    from analysis.export.writers import _json_safe

    check_apart(args)
    warnings: list[str] = []
    text = args.text
    if args.text_file is not None:
        text, warnings = read_text_file(args.text_file)
    if not text or not text.strip():
        raise InputError("The text is empty: give --text or a non-empty --text-file.")
    if args.json is not None:
        from analysis.export.paths import check_file_target

        check_file_target(args.json)  # before the slow part
    from analysis.measures import ablation, attribution
    from analysis.run.tokenize import check_text, token_limit, tokenize, truncation_warning, without_bom
    from analysis.run.inference import bos_used

    check_text(text)
    for warning in warnings:
        warn(warning)
    loaded = load_model_of(args)
    ablation.heads_site(loaded)  # an encoder is refused: it has no next-token logits to attribute
    answer = attribution.single_token(loaded, args.answer, "answer")
    wrong = None if args.wrong is None else attribution.single_token(loaded, args.wrong, "wrong answer")
    if wrong is not None and wrong == answer:
        raise InputError(f"The answer and the wrong answer are the same token ({args.answer!r}): the logit "
                         "difference would be 0.")
    text, bom = without_bom(text)
    for warning in bom:
        warn(warning)
    use_bos = False if args.chat else bos_used(loaded, args.bos)
    ids, _, cut = tokenize(loaded, text, use_bos, args.max_tokens, chat=args.chat)
    if cut:
        warn(truncation_warning(loaded, ids, use_bos, token_limit(loaded, args.max_tokens),
                                "run: the attribution describes that part", chat=args.chat))
    result = attribution.attribute(loaded, list(ids), answer, wrong, args.position)
    data = {"n_tokens": len(ids), "truncated": cut, **result.to_dict()}
    out = compact_json(_json_safe(data))
    if args.json is not None:
        signals.deferred = True  # the file is written whole, then the command ends
        write_file_atomically(args.json, lambda tmp: Path(tmp).write_text(out + "\n", encoding="utf-8"))
    print(out)
    return 0
