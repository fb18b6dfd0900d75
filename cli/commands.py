"""The command table, and the last line of defence: whatever a command raises is one line on stderr."""
from __future__ import annotations

import os

from .ablate import cmd_ablate
from .app import cmd_gui
from .attribute import cmd_attribute
from .bench.command import cmd_bench
from .calc import cmd_calc
from .compose import cmd_compose
from .export import cmd_export
from .figure import cmd_figure
from .lens import cmd_lens
from .models import cmd_models
from .output import fail, user_message
from .parser import parse_args
from .patch import cmd_patch
from .scan import cmd_scan


def run(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (the process's arguments when None), run the command, and return the exit code."""
    args = parse_args(argv)
    command = {"calc": cmd_calc, "export": cmd_export, "scan": cmd_scan, "ablate": cmd_ablate,
               "attribute": cmd_attribute, "patch": cmd_patch, "lens": cmd_lens, "compose": cmd_compose,
               "bench": cmd_bench, "models": cmd_models, "figure": cmd_figure}.get(args.command, cmd_gui)
    try:
        return command(args)
    except KeyboardInterrupt:
        return fail("interrupted (Ctrl+C)", 130)
    except MemoryError:
        return fail("out of memory: try a shorter text or a smaller model.")
    except Exception as exc:  # a bug: one line for the user, the traceback when debugging
        from analysis.errors import AttnScopeError

        if isinstance(exc, AttnScopeError):
            return fail(user_message(exc))
        if os.environ.get("ATTNSCOPE_DEBUG"):
            raise
        return fail(f"unexpected {type(exc).__name__}: {exc} (a bug in AttnScope; set ATTNSCOPE_DEBUG=1 for "
                    "the traceback)")
