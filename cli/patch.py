"""``attnscope patch``: activation patching between a clean and a corrupted prompt (decoders), as JSON."""
from __future__ import annotations

from .inputs import check_apart, load_model_of, text_ids
from .output import compact_json, count_progress, save_text
from .signals import Signals, stopped


def cmd_patch(args) -> int:
    return stopped(args, lambda signals: _patch(args, signals))


def _patch(args, signals: Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.writers import _json_safe
    from analysis.measures import ablation, patching
    from analysis.run.tokenize import check_text

    check_apart(args)
    for name, text in (("--clean", args.clean), ("--corrupted", args.corrupted)):
        if not text or not text.strip():
            raise InputError(f"The {name[2:]} prompt is empty: give {name} a text.")
        check_text(text)
    if args.json is not None:
        from analysis.export.paths import check_file_target

        check_file_target(args.json)  # before the slow part
    loaded = load_model_of(args)
    ablation.heads_site(loaded)  # an encoder is refused: it has no next-token logits to patch
    metric = patching.make_metric(loaded, args.metric, args.answer, args.wrong, args.position)
    clean, clean_cut = text_ids(loaded, args.clean, args, "run: the patching describes that part")
    corrupted, corrupted_cut = text_ids(loaded, args.corrupted, args, "run: the patching describes that part")
    result = patching.patch(loaded, clean, corrupted, metric, args.what, denoising=not args.noising,
                            progress=count_progress(f"patching {args.what}"))
    tokens = loaded.family.display_tokens(loaded.tokenizer, loaded.tokenizer.convert_ids_to_tokens(clean))
    data = {**result.to_dict(), "tokens": list(tokens), "truncated": clean_cut or corrupted_cut,
            "top": [[*index, effect] for index, effect in result.top(10)]}
    out = compact_json(_json_safe(data))
    if args.json is not None:
        save_text(args.json, out, signals)
    print(out)
    return 0
