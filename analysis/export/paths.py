"""Path checks made before anything is written, each failure one sentence naming the path:

- :func:`path_problem`: a name the file system cannot hold is a sentence, not "File name too long";
- :func:`check_outputs_apart`: no command's output can be, or hold, one of its inputs;
- :func:`check_file_target`: what a file export may be written to; links are judged as the kernel
  resolves them (:func:`physical_path`).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import ExportError
from .names import LONGEST_INNER


def _reason(exc: OSError) -> str:
    """The cause of an OSError as words a user knows."""
    return {errno.ENOSPC: "the disk is full (no space left on device)", getattr(errno, "EDQUOT", -1): "the disk quota is used up",
            errno.EACCES: "permission denied", errno.EPERM: "permission denied",
            errno.EROFS: "the file system is read-only", errno.ENAMETOOLONG: "the name is too long",
            errno.ENOTDIR: "part of the path is a file, not a folder",
            errno.EISDIR: "a folder is in the way"}.get(exc.errno, (exc.strerror or str(exc)).rstrip(".").lower())


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would race with other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


# ----------------------------------------------------------------------------- names the file system can hold
def _pathconf(folder: str, name: str, default: int) -> int:
    try:
        value = os.pathconf(folder, name)
    except (AttributeError, OSError, ValueError):
        return default
    return value if value and value > 0 else default


def _room(absolute: bytes, writes: str | None) -> int:
    """How many bytes longer than ``absolute`` the longest path is that an export to it writes: for a
    ``"folder"``, the earlier export moved aside (``.attnscope-old-<name>-<hash>-<8>/export``) with
    :data:`LONGEST_INNER` in it; for a ``"file"``, its temporary name beside it (``.<stem>.attnscope-<8><ext>``)."""
    if writes is None:
        return 0
    name = os.path.basename(absolute)
    if writes == "folder":
        aside = len(b".attnscope-old-") + len(name[:40]) + 1 + 10 + 1 + 8 + len(b"/export")
        return max(aside - len(name), 0) + LONGEST_INNER
    stem, suffix = os.path.splitext(name)
    temporary = 1 + len(stem[:40]) + len(b".attnscope-") + 8 + len(suffix)
    return max(temporary - len(name), 0)


def path_problem(path: str | Path, writes: str | None = None) -> str | None:
    """Why ``path`` cannot name a file or folder here, in words without the path itself, or None.

    Refused: a NUL character; one name (a component) longer than the file system's NAME_MAX bytes
    (255 on most); the whole path, made absolute as AttnScope uses it, longer than PATH_MAX − 1 bytes
    (4095 on Linux) — for an output (``writes`` ``"folder"`` or ``"file"``), with room for the longest
    name AttnScope writes in or beside it (:func:`_room`). The limits are the nearest existing folder's.
    Checked where a path option is parsed and before anything is written, so that no user meets a raw
    "File name too long", and none meets it after the slow part."""
    text = os.fspath(path)
    if "\x00" in text:
        return "it holds a NUL character, which no file name can"
    try:
        absolute = os.path.abspath(text)
        raw = os.fsencode(absolute)
    except (UnicodeError, ValueError):
        return "it holds characters that cannot be part of a file name here"
    existing = os.path.dirname(absolute)
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    name_max = _pathconf(existing, "PC_NAME_MAX", 255)
    path_max = _pathconf(existing, "PC_PATH_MAX", 4096)
    for part in raw.split(os.fsencode(os.sep)):
        if len(part) > name_max:
            shown = os.fsdecode(part)[:24]
            return (f"a name in it is {len(part):,} bytes long ('{shown}…'); the file system allows at most "
                    f"{name_max} bytes per name")
    room = _room(raw, writes)
    if len(raw) + room >= path_max:
        more = f", and AttnScope writes names up to {room} bytes longer in it" if len(raw) < path_max else ""
        return (f"it is {len(raw):,} bytes long as a full path{more}; the file system allows at most "
                f"{path_max - 1:,} bytes")
    return None


def _p(path: str | Path, most: int = 160) -> str:
    """``path`` for a message: whole, or, when longer than ``most`` characters, its start and end around
    an ellipsis, so that the sentence around it (the reason) is always shown whole."""
    text = os.fspath(path)
    return text if len(text) <= most else f"{text[:50]}…{text[-(most - 51):]}"


def _check_path(path: Path, writes: str | None = None) -> None:
    problem = path_problem(path, writes)
    if problem is not None:
        raise ExportError(f"Cannot write to {_p(path)}: {problem}.")


# ----------------------------------------------------------------------------- outputs never inputs
def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _walk(folder: str, limit: int = 100_000) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of everything under ``folder``, links not followed, at most ``limit`` entries."""
    stack, seen = [folder], 0
    while stack:
        try:
            with os.scandir(stack.pop()) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield entry.path, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)


def _ancestors(real: str) -> set[tuple[int, int]]:
    """The identities of ``real`` and of every folder above it."""
    ids, path = set(), real
    while True:
        try:
            ids.add(_identity(os.stat(path)))
        except (OSError, ValueError):
            pass
        parent = os.path.dirname(path)
        if parent == path:
            return ids
        path = parent


def check_outputs_apart(inputs: Iterable[tuple[str, str | Path]],
                        outputs: Iterable[tuple[str, str | Path, str]]) -> None:
    """ExportError unless no output of a command can be, or hold, one of its inputs. Creates nothing.

    ``inputs``: (what, path) — what the command reads, named as the user gave it (``"--text-file
    notes.txt"``, ``"--model m"``): a file, or a folder with every file in it (a model's, a texts
    folder). ``outputs``: (option, path, kind) — ``kind`` is ``"file"`` (renamed over: it must not be
    an input file) or ``"folder"`` (replaced as a whole: it must not be, or hold, an input, nor a hard
    link of one). Paths are compared resolved (relative spellings, ``..``, links) and by
    (st_dev, st_ino) (hard links, a folder reached two ways); what does not exist is not an input.
    """
    files: dict[tuple[int, int], tuple[str, str]] = {}  # identity → (the input it is, its resolved path)
    chains = []  # (what, resolved path, the identities of it and of every folder above it)
    for what, path in inputs:
        try:
            real = os.path.realpath(os.fspath(path))
            st = os.stat(real)
        except (OSError, ValueError):
            continue  # not there: its reader says so
        files.setdefault(_identity(st), (what, real))
        if stat.S_ISDIR(st.st_mode):
            for inner, lst in _walk(real):
                if stat.S_ISDIR(lst.st_mode):
                    continue
                try:  # a link: what it points to (a hub snapshot's files are links to its blobs)
                    target = os.stat(inner) if stat.S_ISLNK(lst.st_mode) else lst
                except OSError:
                    continue
                files.setdefault(_identity(target), (f"{os.path.relpath(inner, real)} in {what}",
                                                     os.path.realpath(inner)))
        chains.append((what, real, _ancestors(real)))
    for option, path, kind in outputs:
        shown = f"{option} {_p(path)}"
        other = option if option.startswith("-") else f"place for {option}"  # "--out", or "the export"
        try:
            real = os.path.realpath(os.fspath(path))
            st = os.stat(real)
        except (OSError, ValueError):
            continue  # nothing there yet: it is no input and holds none
        linked = " (through a link)" if os.path.abspath(os.fspath(path)) != real else ""
        if kind == "file":
            if _identity(st) in files:
                which, its_path = files[_identity(st)]
                how = linked or (" (the same file under another name: a hard link)" if real != its_path else "")
                raise ExportError(f"{shown} is {which}{how}: AttnScope never writes over what it reads; "
                                  f"choose another {other}.")
            continue
        for what, in_real, chain in chains:
            if _identity(st) in chain:
                verb = "is" if real == in_real else "holds"
                raise ExportError(f"{shown} {verb} {what}{linked}: an export there would delete it; "
                                  f"choose another {other}.")
        if stat.S_ISDIR(st.st_mode):
            for inner, lst in _walk(real, limit=10_000):
                if not stat.S_ISDIR(lst.st_mode) and lst.st_nlink > 1 and _identity(lst) in files:
                    raise ExportError(f"{shown} holds {os.path.relpath(inner, real)}, the same file as "
                                      f"{files[_identity(lst)][0]} (a hard link): AttnScope never replaces what "
                                      f"it reads; choose another {other}.")


# ----------------------------------------------------------------------------- where a path leads, who may write
def physical_path(path: str | Path) -> Path:
    """``path`` as the kernel resolves it, absolute: its folder resolved (links, then ``..``, as
    ``os.path.realpath`` does), its last name kept as it is (a link there is judged by the caller). The one
    resolution of a target: ``os.path.abspath`` removes ``lnk/..`` as text and names another place than the
    one the kernel writes to when ``lnk`` is a link."""
    text = os.fspath(path)
    head, name = os.path.split(text.rstrip(os.sep) or text)
    if name in ("", ".", ".."):
        return Path(os.path.realpath(text))
    return Path(os.path.join(os.path.realpath(head or os.curdir), name))


def _link_end(link: str) -> str:
    """Where the chain of links starting at ``link`` ends: "a link to X, which does not exist" (X the last
    name of the chain, which is no link), or "a loop of links"."""
    seen, current = set(), link
    for _ in range(64):
        if not os.path.islink(current):
            return f"a link to {_p(current)}, which does not exist"
        if current in seen:
            break
        seen.add(current)
        try:
            target = os.readlink(current)
        except OSError:
            break
        current = os.path.join(os.path.realpath(os.path.dirname(current)), target)
        current = physical_path(current) if os.path.basename(target) not in ("", ".", "..") else Path(current)
        current = os.fspath(current)
    return "a loop of links, which leads nowhere"


def _check_links(path: str | Path, advice: str) -> None:
    """ExportError when ``path`` or a folder above it is a link to nothing (or a loop of links): the kernel
    would say "no such file or directory" only when the export is written, after the slow part."""
    text = os.path.join(os.getcwd(), os.fspath(path))
    parts = [p for p in text.split(os.sep) if p and p != os.curdir]
    current = os.sep
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        if not os.path.lexists(current):
            return  # from here on nothing exists: it is created
        if os.path.islink(current) and not os.path.exists(current):
            what = "" if i == len(parts) - 1 else f"Cannot write to {_p(text)}: "
            raise ExportError(f"{what}{_p(current)} is {_link_end(current)}: {advice}.")


def _what(path: Path) -> str:
    """What ``path`` is, in words: "a file", "a device", "a named pipe", "a socket", "a folder", each
    "a link to …" (with where it leads) when ``path`` is a link."""
    try:
        st = os.stat(path)
    except OSError:
        return "a link to nothing" if os.path.islink(path) else "missing"
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file"), (stat.S_ISCHR, "a device"),
             (stat.S_ISBLK, "a device"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))
    kind = next((words for test, words in kinds if test(st.st_mode)), "not a file")
    return f"a link to {kind} ({os.path.realpath(path)})" if os.path.islink(path) else kind


def _check_writable_parent(target: Path) -> None:
    """ExportError unless the nearest existing folder above ``target`` is a folder AttnScope may write in."""
    existing = target.parent
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        raise ExportError(f"Cannot write to {_p(target)}: {_p(existing)} is {_what(existing)}, not a folder.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ExportError(f"Cannot write to {_p(target)}: permission denied in {_p(existing)}.")


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder``'s missing ancestors (not ``folder``); return the ones created, outermost first."""
    missing = []
    parent = folder.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    created = []
    try:
        for path in reversed(missing):
            try:
                path.mkdir()
            except FileExistsError:  # another export made it meanwhile: it is not ours to remove
                continue
            created.append(path)
    except OSError:
        _remove_created(created)
        raise
    return created


def _remove_created(created: list[Path]) -> None:
    for path in reversed(created):
        try:
            path.rmdir()  # only if still empty
        except OSError:
            break


def check_file_target(path: Path) -> Path:
    """The file an export may be written to, as an absolute path, or ExportError with a sentence. Creates nothing.

    Refused: an empty name, a name the file system cannot hold, a folder, anything already there that is
    not a regular file (a device such as /dev/null, a named pipe, a socket: the rename would replace it
    with a file) or that is a link (the rename would replace the link, not what it points to), a parent
    that is a file, and a place where nothing can be written.
    """
    if path is None or str(path).strip() == "":
        raise ExportError("No file name given: name one, such as out.json.")
    _check_path(Path(path), "file")
    _check_links(path, "give a file in a folder that exists, or create the one the link points to")
    path = physical_path(path)
    if path.is_symlink():
        raise ExportError(f"{_p(path)} is a link: give the file itself (AttnScope replaces files, not what links point to).")
    if path.is_dir():
        raise ExportError(f"{_p(path)} is a folder: give a file name to export to.")
    if path.exists() and not path.is_file():
        raise ExportError(f"{_p(path)} is not a regular file (a device, pipe or socket); give a file name to export to.")
    _check_writable_parent(path)
    return path
