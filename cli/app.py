"""``attnscope`` with no command: open the app, once it is known that a window can open here."""
from __future__ import annotations

import os
import re
import sys

from .output import fail


def display_problem(env=None, platform: str | None = None) -> str | None:
    """Why the app cannot open a window here, or None. Linux only: no DISPLAY / WAYLAND_DISPLAY /
    QT_QPA_PLATFORM at all, or an X display whose server does not answer (checked by connecting to its
    socket, so Qt never gets to abort with its own multi-line message)."""
    import socket

    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        return None
    qpa = env.get("QT_QPA_PLATFORM", "").strip()
    display, wayland = env.get("DISPLAY", "").strip(), env.get("WAYLAND_DISPLAY", "").strip()
    if qpa and not qpa.startswith("xcb"):
        return None  # offscreen, wayland, vnc …: Qt's own choice, asked for explicitly
    if not display and not wayland:
        return "no display found (DISPLAY and WAYLAND_DISPLAY are unset)"
    if not display or (wayland and not qpa):
        return None
    match = re.fullmatch(r"(?P<host>[^:]*):(?P<number>\d+)(\.\d+)?", display)
    if not match:
        return f"DISPLAY={display!r} is not a display name such as :0"
    host, number = match["host"], int(match["number"])
    try:
        if host in ("", "unix") or host.startswith("/"):
            path = host if host.startswith("/") else f"/tmp/.X11-unix/X{number}"
            for address in (path, "\0" + path):  # the file, then Linux's abstract socket of the same name
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(2)
                    try:
                        sock.connect(address)
                        return None
                    except OSError:
                        continue
            raise OSError("no X server listens there")
        with socket.create_connection((host, 6000 + number), timeout=2):
            return None
    except OSError:
        return f"cannot connect to the X display {display} (is an X server running there?)"


def cmd_gui(args) -> int:
    if getattr(args, "text_file", None) is not None:  # read before any window opens: a bad file is one line
        from .inputs import read_text_file

        args.text, warnings = read_text_file(args.text_file)
        for warning in warnings:
            print(f"attnscope: warning: {warning}", file=sys.stderr)
    problem = display_problem()
    if problem is not None:
        return fail(f"{problem}. On a desktop run it there; here try 'xvfb-run -a python main.py', or use the "
                    "command line: python main.py export --model bundled --text 'The cat sat' --out out/")
    from gui.app import run_app, shut_down_qt

    try:
        return run_app(args)
    finally:
        shut_down_qt()  # windows, then the QApplication, before Python's exit: every way out leaves Qt in order
