"""``attnscope lens``: the logit lens, every layer's residual stream decoded at every position (decoders), as JSON."""
from __future__ import annotations

from pathlib import Path

from .inputs import check_apart, load_model_of, read_text_file
from .output import compact_json, warn
from .signals import Signals, stopped


def cmd_lens(args) -> int:
    return stopped(args, lambda signals: _lens(args, signals))


def _lens(args, signals: Signals) -> int:
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
    from analysis.measures import ablation
    from analysis.measures.logit_lens import logit_lens
    from analysis.run.inference import bos_used
    from analysis.run.tokenize import check_text, token_limit, tokenize, truncation_warning, without_bom

    check_text(text)
    text, bom = without_bom(text)
    for warning in warnings + bom:
        warn(warning)
    loaded = load_model_of(args)
    ablation.heads_site(loaded)  # an encoder is refused: it predicts no next token
    use_bos = False if args.chat else bos_used(loaded, args.bos)
    ids, _, cut = tokenize(loaded, text, use_bos, args.max_tokens, chat=args.chat)
    if cut:
        warn(truncation_warning(loaded, ids, use_bos, token_limit(loaded, args.max_tokens),
                                "run: the lens describes that part", chat=args.chat))
    lens = logit_lens(loaded, list(ids))
    decode = lambda i: loaded.tokenizer.decode([int(i)])  # noqa: E731 - the token as text (" Mary")
    data = {"n_tokens": len(ids), "truncated": cut, "tokens": [decode(i) for i in ids],
            "top": [[decode(i) for i in row] for row in lens.top], "top_ids": lens.top.tolist(),
            "prob": lens.prob.tolist(), "final_rank": lens.final_rank.tolist(),
            "surprisal": lens.surprisal.tolist()}
    out = compact_json(_json_safe(data))
    if args.json is not None:
        signals.deferred = True  # the file is written whole, then the command ends
        write_file_atomically(args.json, lambda tmp: Path(tmp).write_text(out + "\n", encoding="utf-8"))
    print(out)
    return 0
