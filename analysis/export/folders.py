"""Whole export folders and files written atomically: nothing is ever half-written, and nothing of the
user's is ever written over.

- :func:`write_file_atomically` writes one file under a temporary name beside it and renames it
  into place only when complete;
- :func:`write_folder_atomically` fills a hidden staging folder beside the destination, then swaps
  it in as a whole (the earlier export is moved aside, the new one moved in, the old one deleted;
  on any failure the earlier export is put back). Only an empty folder or an AttnScope export is
  ever replaced, and only when it holds nothing but what AttnScope wrote there (the list in
  :data:`~analysis.export.names.MARKER`); two exports to one folder take turns
  (:func:`analysis.export.lock._export_lock`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from ..errors import ExportError
from .formats import IMAGE_FORMATS
from .lock import _digest, _export_lock
from .names import GENERATOR, MARKER
from .paths import (_check_links, _check_path, _check_writable_parent, _make_parents, _p, _reason, _remove_created,
                    _umask, _walk, _what, check_file_target, physical_path)
from .writers import write_json


# ----------------------------------------------------------------------------- what an export folder holds
def is_attnscope_export(folder: Path) -> bool:
    """True when ``folder`` holds an AttnScope export: :data:`MARKER`, or a ``summary.json`` whose
    ``generator`` is ``"attnscope"``."""
    for name in (MARKER, "summary.json"):
        path = Path(folder) / name
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size < 10_000_000:
                if json.loads(path.read_text(encoding="utf-8")).get("generator") == GENERATOR:
                    return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


def _manifest(folder: Path) -> tuple[set[str], set[str] | None] | None:
    """What :data:`MARKER` says the export in ``folder`` wrote: (files, folders), folders None when the
    marker predates that list; None when there is no readable marker with a file list."""
    path = Path(folder) / MARKER
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size >= 10_000_000:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("generator") != GENERATOR or not isinstance(data.get("files"), list):
        return None
    files = {f for f in data["files"] if isinstance(f, str)}
    folders = data.get("folders")
    folders = {f for f in folders if isinstance(f, str)} if isinstance(folders, list) else None
    return files, folders


#: What an export or a scan of any AttnScope version writes at its top level, and in ``heads/``
#: (:data:`HEAD_IMAGE`): the names that count as AttnScope's in a folder whose :data:`MARKER` has no file
#: list (an export of a version before the list, or one whose marker was deleted).
EXPORT_NAMES = frozenset({"attention.npz", "scores.csv", "scores_tl.csv", "parity.json", "summary.json",
                          *(f"grid.{fmt}" for fmt in IMAGE_FORMATS), "scores_mean.csv", "scores_std.csv",
                          "scores_per_text.csv", "texts.csv", MARKER})
HEAD_IMAGE = re.compile(rf"heads/L[0-9]+H[0-9]+\.(?:{'|'.join(IMAGE_FORMATS)})")


def not_written_by_attnscope(folder: Path, most: int = 4) -> list[str]:
    """What in ``folder`` (an AttnScope export) AttnScope did not write there, as relative paths (a folder
    with a trailing ``/``, not looked into), at most ``most`` of them; [] when all of it is AttnScope's.

    AttnScope's: the marker, the files it lists, the folders it lists and those above a listed file (for a
    marker without a folder list, an empty folder too: nothing in it can be lost). Without a marker file
    list (an export of an earlier version, or a marker deleted), only the names an export of any version
    writes (:data:`EXPORT_NAMES`, ``heads/`` with :data:`HEAD_IMAGE` files)."""
    manifest = _manifest(folder)
    if manifest is None:
        files = set(EXPORT_NAMES)
        try:
            with os.scandir(os.path.join(os.fspath(folder), "heads")) as listing:
                files.update(rel for rel in (f"heads/{e.name}" for e in listing) if HEAD_IMAGE.fullmatch(rel))
        except OSError:
            pass
        manifest = files, {"heads"}
    files, folders = manifest
    above = {p.as_posix() for f in files for p in Path(f).parents if p.as_posix() != "."}
    own_folders = above | (folders or set())
    foreign: list[str] = []
    root = os.fspath(folder)
    stack = [root]
    while stack and len(foreign) < most:
        current = stack.pop()
        try:
            with os.scandir(current) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            rel = Path(os.path.relpath(entry.path, root)).as_posix()
            if entry.is_dir(follow_symlinks=False):
                if rel in own_folders:
                    stack.append(entry.path)
                elif folders is None and not any(True for _ in _walk(entry.path, limit=1)):
                    continue  # an empty folder of an older export
                else:
                    foreign.append(rel + "/")
            elif rel != MARKER and rel not in files:
                foreign.append(rel)
            if len(foreign) >= most:
                break
    return foreign


def _foreign_refusal(out_dir: Path, foreign: list[str]) -> ExportError:
    names = ", ".join(foreign[:3]) + (" and more" if len(foreign) > 3 else "")
    it = "it" if len(foreign) == 1 else "them"
    return ExportError(f"{_p(out_dir)} holds {names}, which AttnScope did not write: an export there would delete "
                       f"{it}; move {it} elsewhere or choose another folder.")


def check_export_target(out_dir: Path) -> Path:
    """The folder an export may go to, as an absolute path, or ExportError with a sentence. Creates nothing.

    Refused: an empty name, a name the file system cannot hold, a file, a link to nothing, the current
    folder (or one that holds it), a folder of files that is not an AttnScope export, an export holding a
    file the user saved there (anything its :data:`MARKER` does not list), and a place where nothing can
    be written.
    """
    if out_dir is None or str(out_dir).strip() == "":
        raise ExportError("No export folder given: name one, such as out/.")
    _check_path(Path(out_dir), "folder")
    _check_links(out_dir, "give a folder, or create the one the link points to")
    out_dir = physical_path(out_dir)
    if out_dir.is_symlink() and out_dir.is_dir():
        out_dir = Path(os.path.realpath(out_dir))
    cwd = Path(os.path.realpath(os.getcwd()))
    if out_dir == cwd or out_dir in cwd.parents or out_dir.parent == out_dir:
        raise ExportError(f"{_p(out_dir)} is the current folder or holds it: name a folder for the export, such as out/.")
    if os.path.lexists(out_dir):
        if not out_dir.is_dir():
            raise ExportError(f"{_p(out_dir)} is {_what(out_dir)}, not a folder: choose a folder for the export.")
        try:
            with os.scandir(out_dir) as listing:
                entries = next(listing, None)
        except OSError as exc:
            raise ExportError(f"Cannot read {_p(out_dir)}: {_reason(exc)}.") from None
        if entries is not None and not is_attnscope_export(out_dir):
            raise ExportError(f"{_p(out_dir)} holds files that are not an AttnScope export; AttnScope replaces only "
                              "its own exports or empty folders: choose a new or empty folder.")
        foreign = not_written_by_attnscope(out_dir)
        if foreign:
            raise _foreign_refusal(out_dir, foreign)
    _check_writable_parent(out_dir)
    return out_dir


# ----------------------------------------------------------------------------- atomic writes
class Written(list):
    """The files an export wrote (paths inside its folder), and ``warnings``: sentences about what went
    wrong once the new export was complete and in place (an earlier export that could not be deleted
    wholly). A list, so that callers that only want the files need nothing else."""

    def __init__(self, paths: Iterable[Path] = (), warnings: Iterable[str] = ()):
        super().__init__(paths)
        self.warnings: tuple[str, ...] = tuple(warnings)


FolderWriter = Callable[[Path], object]  # fills a (staging) folder


def _listing(staging: Path) -> tuple[list[str], list[str]]:
    """The files and folders a writer left in ``staging``, as sorted relative paths."""
    files, folders = [], []
    for path, lst in _walk(os.fspath(staging), limit=10**9):
        rel = Path(os.path.relpath(path, staging)).as_posix()
        (folders if stat.S_ISDIR(lst.st_mode) else files).append(rel)
    return sorted(f for f in files if f != MARKER), sorted(folders)


def write_folder_atomically(out_dir: Path, write: FolderWriter, check: Callable[[], None] | None = None) -> Written:
    """Run ``write(staging)`` to fill a hidden folder beside ``out_dir``, then make it ``out_dir`` as a whole.

    An earlier export in ``out_dir`` is replaced entirely (no stale files stay) and kept intact if
    anything fails or ``check()`` raises (it is called before and after writing and just before the
    swap: the place to stop on Ctrl+C). An earlier export holding anything AttnScope did not write is
    refused, naming it. Folders created for the export are removed again on failure. Exports to one
    folder take turns (:func:`_export_lock`). OSError (disk full, permission) becomes ExportError with a
    sentence naming ``out_dir``. Returns the files written, as paths inside ``out_dir`` (:class:`Written`,
    with a warning when the earlier export could not be deleted wholly).
    """
    out_dir = check_export_target(out_dir)
    created: list[Path] = []
    staging: Path | None = None
    done = False
    try:
        if check is not None:
            check()
        created = _make_parents(out_dir)
        with _export_lock(out_dir, check, created) as locked:
            check_export_target(out_dir)  # again: another export may have finished while this one waited
            stale = _remove_stale(out_dir) if locked else []
            staging = Path(tempfile.mkdtemp(prefix=_hidden_prefix("export", out_dir), dir=out_dir.parent))
            os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; an export folder is not
            write(staging)
            if check is not None:
                check()
            names, folders = _listing(staging)
            write_json({"generator": GENERATOR, "files": names, "folders": folders}, staging / MARKER)
            if check is not None:
                check()
            warnings = stale + _swap_in(staging, out_dir)
            done = True
        return Written([out_dir / name for name in names], warnings)
    except OSError as exc:
        raise ExportError(f"Cannot write the export to {_p(out_dir)}: {_reason(exc)}; nothing was changed there.") from None
    finally:
        if not done:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            _remove_created(created)


def _hidden_prefix(kind: str, out_dir: Path) -> str:
    """The name start of an export's hidden folders beside ``out_dir``: ``.attnscope-export-`` (the staging
    folder) or ``.attnscope-old-`` (the earlier export moved aside), then the name and the hash of the whole
    name, so that they belong to this ``out_dir`` alone (as its lock, :func:`lock_path`)."""
    return f".attnscope-{kind}-{out_dir.name[:40]}-{_digest(out_dir)}-"


def _remove_stale(out_dir: Path) -> list[str]:
    """Remove what exports to ``out_dir`` killed midway (kill -9, a power cut) left beside it: staging
    folders and earlier exports moved aside. Called holding the lock: every export to ``out_dir`` writes
    those only while it holds it, so any there now is an owner's that is gone. An earlier export moved aside
    that holds what AttnScope did not write is kept; returns warnings naming what stays and why."""
    warnings = []
    prefixes = _hidden_prefix("export", out_dir), _hidden_prefix("old", out_dir)
    try:
        with os.scandir(out_dir.parent) as listing:
            stale = sorted(e.path for e in listing if e.name.startswith(prefixes) and e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    for path in stale:
        inner = Path(path) / "export"
        if os.path.basename(path).startswith(prefixes[1]) and inner.is_dir():
            foreign = not_written_by_attnscope(inner)
            if foreign:
                warnings.append(f"{_p(path)} holds an earlier export of {_p(out_dir)} with {', '.join(foreign[:3])}, which "
                                "AttnScope did not write: it was kept; move what you want from it, then delete it.")
                continue
        try:
            shutil.rmtree(path)
        except OSError as exc:
            shutil.rmtree(path, ignore_errors=True)
            if os.path.lexists(path):
                warnings.append(f"{_p(path)} is left from an earlier export to {_p(out_dir)} and cannot be deleted "
                                f"({_reason(exc)}): delete that folder yourself.")
    return warnings


def _swap_in(staging: Path, out_dir: Path) -> list[str]:
    """Make ``staging`` be ``out_dir``: two renames in one folder; an earlier ``out_dir`` is moved aside
    first, put back if it now holds a file AttnScope did not write (saved since the check) or if the
    second rename fails, and deleted once the new one is in place. Returns warnings (see :func:`_delete`)."""
    if not os.path.lexists(out_dir):
        os.rename(staging, out_dir)
        return []
    aside = Path(tempfile.mkdtemp(prefix=_hidden_prefix("old", out_dir), dir=out_dir.parent))
    try:
        os.rename(out_dir, aside / "export")
    except BaseException:
        aside.rmdir()
        raise
    try:
        foreign = not_written_by_attnscope(aside / "export")  # nobody can add to it under this name
        if foreign:
            raise _foreign_refusal(out_dir, foreign)
        os.rename(staging, out_dir)
    except BaseException:
        try:
            os.rename(aside / "export", out_dir)  # the earlier export, back as it was
        except OSError as exc:
            raise ExportError(f"Cannot write the export to {_p(out_dir)}, and the earlier export could not be put "
                              f"back ({_reason(exc)}): it is in {_p(aside / 'export')}.") from None
        aside.rmdir()
        raise
    return _delete(aside, out_dir)


def _delete(aside: Path, out_dir: Path) -> list[str]:
    """Delete the earlier export moved aside; what cannot be deleted stays, and a warning says where and why."""
    try:
        shutil.rmtree(aside)
        return []
    except OSError as exc:
        shutil.rmtree(aside, ignore_errors=True)  # as much as can go
        if not os.path.lexists(aside):
            return []
        what = f"{_p(exc.filename)}: " if exc.filename else ""
        return [f"The new export is in {_p(out_dir)}, but the earlier one could not be deleted wholly ({what}"
                f"{_reason(exc)}); what is left of it is in {_p(aside)}: delete that folder yourself."]


def write_file_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """Run ``write(tmp)`` on a temporary file beside ``path`` (same extension), then rename it to ``path``.

    ``path`` is replaced only when the writer finished; on failure the temporary file is removed and
    an existing ``path`` is untouched. What :func:`check_file_target` refuses is refused first.
    """
    path = check_file_target(path)
    tmp: Path | None = None
    created: list[Path] = []
    try:
        created = _make_parents(path)
        if not path.parent.is_dir():
            raise ExportError(f"Cannot write {_p(path)}: {_p(path.parent)} is a file, not a folder.")
        fd, name = tempfile.mkstemp(prefix=f".{path.stem[:40]}.attnscope-", suffix=path.suffix, dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        os.chmod(tmp, 0o666 & ~_umask())
        write(tmp)
        os.replace(tmp, path)
        tmp = None
        return path
    except OSError as exc:
        raise ExportError(f"Cannot write {_p(path)}: {_reason(exc)}; nothing was changed there.") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
            _remove_created(created)
