"""What the commands print: one-line errors and warnings on stderr, progress on stderr, compact JSON."""
from __future__ import annotations

import re
import sys
import time


def counted(count: int, word: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def fail(message: str, code: int = 2) -> int:
    from analysis.errors import one_line

    print(f"attnscope: error: {one_line(message, 600)}", file=sys.stderr)
    return code


def warn(message: str) -> None:
    from analysis.errors import one_line

    print(f"attnscope: warning: {one_line(message, 600)}", file=sys.stderr)


def user_message(exc) -> str:
    """An AttnScopeError's sentence, with what to type on the command line where the GUI offers a button."""
    from analysis.errors import PickleWeightsError

    if isinstance(exc, PickleWeightsError):
        return f"{exc} To load it anyway, pass --allow-pickle."
    return str(exc)


def save_text(path, text: str, signals) -> None:
    """Write ``text`` and a newline to the file ``path`` whole (a temporary file renamed into place); a signal from
    here on waits until the file is written, then ends the command."""
    from pathlib import Path

    from analysis.export.folders import write_file_atomically

    signals.deferred = True
    write_file_atomically(path, lambda tmp: Path(tmp).write_text(text + "\n", encoding="utf-8"))


def compact_json(data) -> str:
    """Indented JSON with each innermost list on one line (``[1, 3]``, ``["␣The", 0.017]``): strict JSON."""
    import json

    def one_line(match: re.Match) -> str:
        try:
            return json.dumps(json.loads(match.group(0)), ensure_ascii=False, allow_nan=False)
        except ValueError:  # a bracket inside a string: leave that list as it was
            return match.group(0)

    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
    return re.sub(r"\[\s+[^\[\]{}]*?\s+\]", one_line, text)


def terminal_progress():
    """A load's progress on stderr: a byte count that rewrites its line; a long step without one (``total`` < 0,
    ``hub.LONG_STEP``: "dequantizing Q4_1 weights") on a line of its own, once; quick steps (``total`` 0) not."""
    last = {"t": 0.0, "step": ""}

    def report(message: str, done: int, total: int) -> None:
        now = time.monotonic()
        if total < 0:
            if message != last["step"]:
                last["step"] = message
                print(f"{message}…", file=sys.stderr, flush=True)
            return
        if total and (now - last["t"] > 0.5 or done >= total):
            last["t"] = now
            print(f"\r{message}: {done / 1e6:.1f} / {total / 1e6:.1f} MB", end="\n" if done >= total else "",
                  file=sys.stderr, flush=True)

    return report


def count_progress(label: str):
    """A progress bar on stderr for ``progress(done, total)`` callbacks, or None when stderr is not a
    terminal (pipes, logs and tests stay quiet)."""
    isatty = getattr(sys.stderr, "isatty", None)
    if not (isatty and isatty()):
        return None
    started = time.monotonic()

    def report(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        print(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {time.monotonic() - started:.0f} s",
              end="\n" if done >= total else "", file=sys.stderr, flush=True)

    return report
