"""Reading a user's text file safely: bounded, never blocking on a named pipe, one sentence on failure."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import InputError


def read_bounded(path: str | Path, limit: int, regular_only: bool = False) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``path`` and whether the file holds more.

    Never reads more than ``limit`` + 1 bytes and never blocks on a named pipe (it is opened
    non-blocking and refused). A folder, a pipe or a socket is an :class:`InputError`; with
    ``regular_only`` so is any other non-regular file (a device such as ``/dev/zero``).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"Cannot read {path}: it is a folder, not a text file.")
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise InputError(f"Cannot read {path}: it is a named pipe or socket; give a regular text file.")
        if regular_only and not stat.S_ISREG(mode):
            raise InputError(f"Cannot read {path}: it is not a regular text file.")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InputError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)
    return data[:limit], len(data) > limit


def decode_utf8(data: bytes, path: str | Path, final: bool = True) -> str:
    """``data`` as UTF-8; with ``final=False`` a character cut at the end is left out. InputError otherwise."""
    import codecs

    try:
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=final)
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                         "save it as UTF-8.") from None


def read_text_file(path: str | Path, limit: int) -> tuple[str, bool]:
    """The UTF-8 text of a regular file, at most ``limit`` bytes of it, and whether the file holds more.

    The one way AttnScope reads a user's text file (``--text-file``, ``scan --texts``): a folder, a
    pipe, a socket or a device such as ``/dev/zero`` is refused, so is text that is not UTF-8 and a
    file holding NUL bytes (a binary file). When the file is cut, a character cut in two at the end is
    left out. A leading byte-order mark is kept: the caller decides what to do with it.
    """
    data, cut = read_bounded(path, limit, regular_only=True)
    text = decode_utf8(data, path, final=not cut)
    if "\x00" in text:
        raise InputError(f"{path} holds NUL bytes: it looks like a binary file, not text.")
    return text, cut
