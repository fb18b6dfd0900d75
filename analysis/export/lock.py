"""The lock that makes two exports to one folder take turns (from two processes or two threads).

A hidden ``.attnscope-lock-<name>-<hash>`` file beside the export folder (:func:`lock_path`), locked with
``fcntl.flock`` from the target check to the end of the swap (:func:`_export_lock`).
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

try:
    import fcntl
except ImportError:  # Windows: exports to one folder are not serialised there
    fcntl = None

from ..errors import ExportError
from .paths import _make_parents, _p, _what


@contextmanager
def _export_lock(out_dir: Path, check: Callable[[], None] | None, created: list[Path]) -> Iterator[bool]:
    """Hold an exclusive lock beside ``out_dir`` (``fcntl.flock`` on a hidden ``.attnscope-lock-…`` file in
    its folder): two exports to one folder, from two processes or two threads, take turns from the
    target check to the end of the swap. ``check()`` runs while waiting (Ctrl+C stops the wait). Yields
    whether the lock is held (False where the file system has none).

    The holder removes the lock file before it lets go; a waiter that then gets the lock of the removed
    file sees that the name means another file (or none) now, and locks again. Where the file system has
    no locks (some network mounts), the export goes on without one."""
    if fcntl is None:
        yield False
        return
    path = lock_path(out_dir)
    fd = _lock(path, out_dir, check, created)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            try:
                os.unlink(path)
            except OSError:
                pass
            os.close(fd)


def _digest(out_dir: Path) -> str:
    return hashlib.sha1(os.fsencode(out_dir.name)).hexdigest()[:10]


def lock_path(out_dir: Path) -> Path:
    """The lock file of exports to ``out_dir``: ``.attnscope-lock-<name>-<hash of the whole name>`` beside it."""
    return out_dir.parent / f".attnscope-lock-{out_dir.name[:40]}-{_digest(out_dir)}"


#: How the lock file is opened: read-only is enough for flock and opens another user's lock file too; never
#: through a link (O_CREAT would create its target), never waiting (a named pipe there blocks open forever).
LOCK_FLAGS = (os.O_RDONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
              | getattr(os, "O_CLOEXEC", 0))


def _in_the_way(path: Path, out_dir: Path) -> ExportError:
    return ExportError(f"Cannot export to {_p(out_dir)}: {_p(path)}, where AttnScope keeps the lock of exports there, is "
                       f"{_what(path)}, not a lock file; remove it, or choose another folder.")


def _lock(path: Path, out_dir: Path, check: Callable[[], None] | None, created: list[Path]) -> int | None:
    """The descriptor of ``path``, locked and still named ``path``; None where locks are not supported.
    Anything but a regular file at ``path`` (a named pipe, a folder, a link) is refused, naming it."""
    delay, missing = 0.002, 0
    while True:
        try:
            fd = os.open(path, LOCK_FLAGS, 0o666)
        except FileNotFoundError:  # a failed export removed the folders it had made
            missing += 1
            if missing > 3:
                raise
            created.extend(_make_parents(out_dir))
            continue
        except OSError as exc:
            if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
                raise _in_the_way(path, out_dir) from None  # ELOOP, EISDIR, ENXIO (a socket)
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _in_the_way(path, out_dir)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if check is not None:
                        check()
                    time.sleep(delay)
                    delay = min(2 * delay, 0.05)
            try:
                if os.path.samestat(os.fstat(fd), os.lstat(path)):
                    return fd
            except FileNotFoundError:
                pass
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                try:
                    os.unlink(path)
                except OSError:
                    pass
                return None
            raise
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
