"""``attnscope calc``: the attention calculator, softmax(QKᵀ/√d_k)·V on the user's matrices, as JSON."""
from __future__ import annotations

from .output import fail, warn


def cmd_calc(args) -> int:
    import json

    from analysis.errors import AttnScopeError
    from analysis.lessons.calculator import attend, parse_matrix

    try:
        q, k, v = (parse_matrix(text, name) for text, name in ((args.q, "--q"), (args.k, "--k"), (args.v, "--v")))
        result = attend(q, k, v, causal=args.causal)
    except AttnScopeError as exc:
        return fail(str(exc))
    for note in result.notes:
        warn(note)
    print(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    return 0
