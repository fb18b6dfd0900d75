"""Ctrl+C and SIGTERM in the commands that write: stop at once before the output is being written,
between two files while it is, and exit 130 / 143 with one line saying what was left as it was."""
from __future__ import annotations

import os
import signal

from .output import fail, user_message


class Signals:
    """SIGINT and SIGTERM during an export: before the export folder is being written they stop at
    once; while it is (figures are painted, files swapped) they only set a flag that ``check()``
    turns into ``Interrupted`` between two files, so no exception ever lands inside a Qt paint."""

    NAMES = {signal.SIGINT: "Ctrl+C", signal.SIGTERM: "SIGTERM"}

    def __init__(self):
        self.pending: int | None = None
        self.deferred = False
        self.previous = {}

    def __enter__(self):
        for signum in self.NAMES:
            try:
                self.previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: leave the handlers alone
                pass
        return self

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _error(self, signum: int):
        from analysis.errors import Interrupted

        return Interrupted(f"interrupted ({self.NAMES.get(signum, signum)})", signum=signum)

    def _handle(self, signum, frame):
        if self.deferred:
            self.pending = signum
            return
        raise self._error(signum)

    def check(self) -> None:
        if self.pending is not None:
            raise self._error(self.pending)


def stopped(args, work) -> int:
    """Run ``work(signals)`` with Ctrl+C / SIGTERM turned into Interrupted (exit 130 / 143, one line)."""
    from analysis.errors import AttnScopeError, Interrupted

    signals = Signals()
    target = getattr(args, "out", None) or getattr(args, "json", None)
    existed = target is not None and os.path.lexists(target)
    try:
        with signals:
            return work(signals)
    except Interrupted as exc:
        where = "" if target is None else f", and {target} is as it was" if existed else f"; {target} was not created"
        return fail(f"{exc}; nothing was written{where}.", 128 + exc.signum)
    except AttnScopeError as exc:
        return fail(user_message(exc))
