"""``attnscope compose``: Q-, K- and V-composition scores between every earlier and later head, from weights, as JSON."""
from __future__ import annotations

from .inputs import load_model_of
from .output import compact_json, save_text
from .signals import Signals, stopped


def cmd_compose(args) -> int:
    return stopped(args, lambda signals: _compose(args, signals))


def _compose(args, signals: Signals) -> int:
    from analysis.export.writers import _json_safe

    if args.json is not None:
        from analysis.export.paths import check_file_target

        check_file_target(args.json)  # before the slow part
    from analysis.display import head_name
    from analysis.measures.composition import KINDS, model_composition

    loaded = load_model_of(args)
    c = model_composition(loaded)
    data: dict = {"baseline": c.baseline, "layers": loaded.n_layer, "heads": loaded.n_head}
    for kind in KINDS:
        data[f"{kind}_strongest"] = [{"earlier": head_name(a, b), "later": head_name(x, y), "corrected": s}
                                     for a, b, x, y, s in c.strongest(kind, args.top)]
        data[kind] = getattr(c, kind).tolist()  # (L, H, L, H) raw scores, null where not earlier → later
    out = compact_json(_json_safe(data))
    if args.json is not None:
        save_text(args.json, out, signals)
    summary = {k: v for k, v in data.items() if k not in KINDS}
    print(compact_json(_json_safe(summary)))
    return 0
