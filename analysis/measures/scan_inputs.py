"""The texts a scan reads: a file (one text per non-blank line), a folder (one text per ``*.txt`` file), or the
bundled sample (``--texts sample``). Each refusal is one sentence; what a folder held that was skipped is said
in :attr:`Texts.warnings`, and where each text came from in :attr:`Texts.sources`."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Iterable

from ..errors import InputError
from ..textfiles import read_text_file

#: The bundled sample set: a few hundred varied sentences, one a line (``--texts sample``).
SAMPLE_TEXTS = Path(__file__).resolve().parents[2] / "resources" / "texts" / "scan_sample.txt"
#: At most this much text is read from a file or a folder, in all: far more than a scan on a CPU gets through.
TEXTS_LIMIT = 64 * 2**20


def _too_big(what: str, limit: int, hint: str) -> InputError:
    from ..display import format_bytes  # the one format for sizes

    return InputError(f"{what} more than {format_bytes(limit)} of text{hint}")


class Texts(list):
    """The texts read (a list of str), ``warnings``: a sentence for each kind of entry a folder held that was
    skipped, and ``sources``: where each text came from (a folder's file name, ``line N`` of a file, ``sample
    line N`` of the bundled sample). ``scan_texts`` carries both into its result."""

    def __init__(self, texts: Iterable[str] = (), warnings: Iterable[str] = (), sources: Iterable[str] = ()):
        super().__init__(texts)
        self.warnings: tuple[str, ...] = tuple(warnings)
        self.sources: tuple[str, ...] = tuple(sources)


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """The non-blank lines of ``text`` with their line numbers (from 1), one text each: split at a newline
    (``\\n`` or ``\\r\\n``) only, not at the other breaks ``str.splitlines`` knows (\\x0b, \\x0c, \\x1c–\\x1e,
    NEL, U+2028, U+2029, a lone \\r)."""
    return [(n, line.removesuffix("\r")) for n, line in enumerate(text.split("\n"), 1) if line.strip()]


def text_lines(text: str) -> list[str]:
    """The non-blank lines of ``text``, one text each (:func:`numbered_lines`)."""
    return [line for _, line in numbered_lines(text)]


#: How many names a skipped-entries warning lists before "and N more".
SKIPPED_NAMES = 3


def _not_a_file(entry: Path) -> tuple[str, str] | None:
    """None for a regular file (links followed); else what ``entry`` is, singular and plural."""
    try:
        mode = entry.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop", "symbolic link loops"
        if exc.errno == errno.ENOENT and entry.is_symlink():
            return "broken symbolic link", "broken symbolic links"
        return "entry that cannot be examined", "entries that cannot be examined"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "folder", "folders"
    if stat.S_ISFIFO(mode):
        return "named pipe", "named pipes"
    if stat.S_ISSOCK(mode):
        return "socket", "sockets"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device", "devices"
    return "special file", "special files"


def _shown_name(entry: Path) -> str:
    return entry.name if entry.name.isprintable() else ascii(entry.name)


def _skipped_kinds(skipped: dict[tuple[str, str], list[Path]]) -> list[tuple[str, str]]:
    """('5 named pipes', 'a.txt, b.txt, c.txt and 2 more') for each kind, in the order first met."""
    kinds = []
    for (one, many), entries in skipped.items():
        names = ", ".join(_shown_name(e) for e in entries[:SKIPPED_NAMES])
        more = f" and {len(entries) - SKIPPED_NAMES} more" if len(entries) > SKIPPED_NAMES else ""
        kinds.append((f"{len(entries)} {one if len(entries) == 1 else many}", names + more))
    return kinds


def _not_there(p: Path) -> InputError:
    """The sentence for a path that leads to nothing: a link in a loop, a link to nothing, or nothing at all."""
    kind = _not_a_file(p)
    if kind is not None and kind[0] == "symbolic link loop":
        return InputError(f"Cannot read texts: {p} is a symbolic link loop (following it never reaches a file).")
    if kind is not None and kind[0] == "broken symbolic link":
        try:
            target = f" to {os.readlink(p)}"
        except OSError:
            target = ""
        return InputError(f"Cannot read texts: {p} is a broken symbolic link{target}, which does not exist.")
    return InputError(f"Texts not found: {p} does not exist.")


def _case_of_txt(name: str) -> bool:
    """A name that ends in .txt in another case (B.TXT, c.Txt): not scanned, and said so."""
    return name.lower().endswith(".txt") and not name.endswith(".txt")


def read_texts(path: str | Path, limit: int = TEXTS_LIMIT) -> Texts:
    """A text file (one text per non-blank line, :func:`numbered_lines`) or a folder (each regular ``*.txt`` in
    it, by name, is one text; the other entries so named, the names ending in another case of .txt and the
    blank files are skipped, and ``warnings`` names them by kind). ``sources`` says where each text is: its
    file's name, or ``line N`` (``sample line N`` in the bundled sample).

    At most ``limit`` bytes in all (a folder's files together); a missing path, a pipe, a device, a
    binary or non-UTF-8 file, or nothing to scan is an InputError with one sentence. Files are read by
    :func:`analysis.textfiles.read_text_file`, as ``--text-file`` is; a leading byte-order mark is removed."""
    p = Path(path).expanduser()
    warnings: list[str] = []
    if p.is_dir():
        try:
            names = sorted(p.iterdir())
        except OSError as exc:
            raise InputError(f"Cannot read {p}: {exc.strerror or exc}.") from None
        files, skipped = [], {}
        for entry in (e for e in names if e.name.endswith(".txt")):
            kind = _not_a_file(entry)
            if kind is None:
                files.append(entry)
            else:
                skipped.setdefault(kind, []).append(entry)
        other_case = [e for e in names if _case_of_txt(e.name)]
        kinds = _skipped_kinds(skipped)
        cased = _skipped_kinds({("name in another case of .txt", "names in another case of .txt"): other_case}
                               if other_case else {})
        if not files:
            found = "; ".join(f"{what}: {names}" for what, names in kinds + cased)
            raise InputError(f"{p} has no regular .txt files to scan ({found})." if found
                             else f"{p} has no .txt files to scan.")
        warnings = [f"Skipped {what} in {p}: {names} (only regular .txt files are scanned)." for what, names in kinds]
        warnings += [f"Skipped {what} in {p}: {names} (only names ending in .txt, in lower case, are scanned)."
                     for what, names in cased]
        texts, sources, blank, left = [], [], [], limit
        for f in files:
            text, cut = read_text_file(f, left)
            if cut:
                raise _too_big(f"The .txt files in {p} hold", limit,
                               " in all (the limit is for the whole folder); scan a part of them (move some "
                               "files to another folder).")
            left -= len(text.encode("utf-8"))
            text = text.removeprefix("\ufeff")
            if text.strip():
                texts.append(text)
                sources.append(_shown_name(f))
            else:
                blank.append(f)
        for what, names in _skipped_kinds({("blank file", "blank files"): blank} if blank else {}):
            if not texts:
                raise InputError(f"{p} holds no text to scan: its .txt files are blank ({names}).")
            warnings.append(f"Skipped {what} in {p}: {names} (they hold no text).")
    elif p.exists():
        text, cut = read_text_file(p, limit)
        if cut:
            raise _too_big(f"{p} holds", limit, "; scan a part of it (split the file, or pass fewer lines).")
        lines = numbered_lines(text.removeprefix("\ufeff"))
        where = "sample line" if p.resolve() == SAMPLE_TEXTS else "line"
        texts, sources = [line for _, line in lines], [f"{where} {n}" for n, _ in lines]
    else:
        raise _not_there(p)
    if not texts:
        raise InputError(f"{p} holds no text to scan (every line is blank).")
    return Texts(texts, warnings, sources)
