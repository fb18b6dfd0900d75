"""``attnscope models``: the GGUF files already on this computer, as the app's Model list shows them.

One line each on stdout — ``name · size · quantization · where · path`` for a file AttnScope can open,
``name · size · quantization · where · cannot be opened: <why>`` for one it cannot —, then on stderr how many
were found and the places looked in (analysis/model/gguf_scan.py says which and in what order). ``--folder DIR``
(repeatable) looks in DIR as well, at any depth up to the scan's limit; ``--json FILE`` also writes every entry
and the places as JSON. Headers are cached in the user cache folder: a second run reads only new files.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .output import counted, save_text, warn
from .signals import Signals, stopped


def line(found) -> str:
    """The line ``models`` prints for one :class:`~analysis.model.gguf_scan.FoundGguf`."""
    return f"{found.label} · {found.path}" if found.ok else f"{found.label} · cannot be opened: {found.problem}"


def cmd_models(args) -> int:
    return stopped(args, lambda signals: _models(args, signals))


def _models(args, signals: Signals) -> int:
    import json

    from analysis.model.gguf_scan import find_gguf_files

    folders = list(args.folder or ())
    for folder in folders:
        if not Path(folder).is_dir():
            warn(f"{folder} is not a folder: nothing is looked for there.")
    if args.json is not None:
        from analysis.export.paths import check_file_target

        check_file_target(args.json)
    result = find_gguf_files(folders)
    for found in result.files:
        print(line(found))
    places = "; ".join(f"{p.where} ({p.path})" for p in result.looked_in) or "none of the usual places exists here"
    can = sum(f.ok for f in result.files)
    summary = (f"{counted(len(result.files), 'GGUF file')}, {can} of them can be opened" if result.files
               else "No GGUF files found")
    print(f"{summary}. Looked in: {places}.", file=sys.stderr)
    if args.json is not None:
        data = {"files": [f.to_dict() for f in result.files],
                "looked_in": [{"where": p.where, "path": str(p.path)} for p in result.looked_in]}
        text = json.dumps(data, indent=2, ensure_ascii=False)
        save_text(args.json, text, signals)
    return 0
