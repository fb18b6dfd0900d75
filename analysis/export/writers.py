"""Writing results to disk: NPZ, CSV and JSON, and whole export folders written atomically.

The CLI and the GUI both call these writers; image files are drawn by the GUI's figure code
and handed in as a callback, so this module stays free of Qt.

Nothing is ever half-written, and nothing of the user's is ever written over:
- :func:`write_file_atomically` writes one file under a temporary name beside it and renames it
  into place only when complete;
- :func:`write_folder_atomically` fills a hidden staging folder beside the destination, then swaps
  it in as a whole (the earlier export is moved aside, the new one moved in, the old one deleted;
  on any failure the earlier export is put back). Only an empty folder or an AttnScope export is
  ever replaced, and only when it holds nothing but what AttnScope wrote there (the list in
  :data:`MARKER`); two exports to one folder take turns (:func:`_export_lock`);
- :func:`check_outputs_apart`: no command's output can be, or hold, one of its inputs;
- :func:`path_problem`: a name the file system cannot hold is a sentence, not "File name too long".
"""
from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

try:
    import fcntl
except ImportError:  # Windows: exports to one folder are not serialised there
    fcntl = None

import numpy as np

from ..errors import ExportError
from ..measures.head_scores import SCORE_NAMES, HeadScores
from ..run.inference import AttentionResult
from ..run.memory import attention_memory_bytes
from ..measures.lenses import SINK_EPSILON, rollout as attention_rollout, sink_rate
from ..measures.parity import ParityReport
from ..measures.scan import ScanResult

#: The one table of export formats (the CLI's choices and the GUI's dialog read these).
IMAGE_FORMATS = ("png", "svg", "pdf")
DATA_FORMATS = ("npz", "csv", "json")
#: Written into every export folder: ``{"generator": "attnscope", "files": [...], "folders": [...]}``, what
#: the export wrote (paths relative to the folder). A folder holding it may be replaced by a new export
#: when it holds nothing else.
MARKER = ".attnscope-export.json"
GENERATOR = "attnscope"
#: Zip entries get this fixed time so that the same result gives byte-identical .npz files.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def write_json(data: dict, path: Path) -> Path:
    """UTF-8 JSON; NaN and infinities become ``null`` (they are not JSON)."""
    text = json.dumps(_json_safe(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def _savez_deterministic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Like ``np.savez_compressed`` (np.load reads it the same way) but byte-for-byte reproducible:
    numpy stamps the current time into each zip entry; here every entry carries :data:`ZIP_EPOCH`."""
    with zipfile.ZipFile(path, mode="w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asanyarray(array), allow_pickle=False)
            archive.writestr(info, buffer.getvalue())


def write_attention_npz(result: AttentionResult, path: Path, layer: int | None = None, head: int | None = None,
                        value_norms: np.ndarray | None = None, rollout: np.ndarray | None = None) -> Path:
    """``attentions`` float32 (layer, head, query, key) — or one head's (query, key) — with ``tokens``
    (display strings, never empty) and ``token_ids`` int64. The same result gives the same bytes.

    When given, also ``value_norms`` float32 (layer, head, query, key) — ``lenses.value_norms``:
    A[i, j] · ‖f_h(x_j)‖ — and ``rollout`` float32 (layer, query, key) — ``lenses.rollout``; for one
    head, its (query, key) value norms and its layer's rollout."""
    one = layer is not None and head is not None
    arrays = {"attentions": np.asarray(result.attentions[layer, head] if one else result.attentions, dtype=np.float32)}
    if value_norms is not None:
        arrays["value_norms"] = np.asarray(value_norms[layer, head] if one else value_norms, dtype=np.float32)
    if rollout is not None:
        arrays["rollout"] = np.asarray(rollout[layer] if one else rollout, dtype=np.float32)
    arrays.update(tokens=np.array(result.tokens, dtype=str), token_ids=result.token_ids.astype(np.int64))
    _savez_deterministic(Path(path), arrays)
    return Path(path)


def write_head_csv(result: AttentionResult, path: Path, layer: int, head: int) -> Path:
    """One head's attention as a table: a header of key tokens, one row per query token."""
    a = result.attentions[layer, head]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["query \\ key"] + [f"{i}:{t}" for i, t in enumerate(result.tokens)])
        for i, token in enumerate(result.tokens):
            writer.writerow([f"{i}:{token}"] + [f"{x:.6g}" for x in a[i]])
    return path


def write_scores_csv(scores: HeadScores, path: Path) -> Path:
    """Header ``layer,head,<every score>``, one row per head; each cell is ``scores.text``: the value
    (``.6g``), ``nan`` when it is undefined for this text, ``n/a`` when the score does not apply to the
    model (an encoder's induction, a decoder's next token)."""
    n_layer, n_head = scores.shape
    names = [k for k in SCORE_NAMES if k in scores.values]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "head", *names])
        for layer in range(n_layer):
            for head in range(n_head):
                writer.writerow([layer, head, *(scores.text(k, layer, head) for k in names)])
    return path


def write_tl_scores_csv(result: AttentionResult, path: Path, error_measure: str = "mul", exclude_bos: bool = False,
                        exclude_current_token: bool = False) -> Path:
    """TransformerLens-style head detector scores of ``result`` (``tl_scores.scores_of_text``), to compare with
    TL's ``detect_head`` on the same text: header ``layer,head,previous_token_head,duplicate_token_head,
    induction_head,error_measure,exclude_bos,exclude_current_token``, one row per head, the last three
    columns saying how every score of the file was computed (TL's argument names and values). Cells
    ``.6g``; ``nan`` for a text under 2 tokens."""
    from ..measures.tl_patterns import HEAD_NAMES
    from ..measures.tl_scores import scores_of_text

    tl = scores_of_text(result.attentions, np.asarray(result.token_ids), error_measure=error_measure,
                        exclude_bos=exclude_bos, exclude_current_token=exclude_current_token)
    options = [error_measure, str(bool(exclude_bos)).lower(), str(bool(exclude_current_token)).lower()]
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "head", *HEAD_NAMES, "error_measure", "exclude_bos", "exclude_current_token"])
        for layer in range(result.n_layer):
            for head in range(result.n_head):
                writer.writerow([layer, head, *(f"{float(tl[name][layer, head]):.6g}" for name in HEAD_NAMES),
                                 *options])
    return path


def write_result_json(result: AttentionResult, path: Path, scores: HeadScores | None = None,
                      layer: int | None = None, head: int | None = None) -> Path:
    """The tokens, predictions and (one head's or every head's) attention as JSON."""
    attentions = result.attentions if layer is None else result.attentions[layer, head]
    data = {"text": result.text, "tokens": list(result.tokens), "token_ids": result.token_ids.tolist(),
            "bos": result.bos, "truncated": result.truncated, "model": result.model_label,
            "family": result.family, "causal": result.causal,
            "axes": "(query, key)" if layer is not None else "(layer, head, query, key)",
            "layer": layer, "head": head,
            "attentions": np.round(attentions.astype(np.float64), 7).tolist(),
            "predictions": [{"token": p.token, "token_id": p.token_id, "probability": p.probability}
                            for p in result.predictions]}
    if result.prediction_note:
        data["prediction_note"] = result.prediction_note
    if scores is not None:
        data["scores"] = scores.rows(na=None)  # a score that does not apply is null, as undefined (NaN) ones are
    return write_json(data, path)


def summary(result: AttentionResult, timings: dict | None = None, sink_epsilon: float = SINK_EPSILON) -> dict:
    """What ``summary.json`` holds: the ``text`` analysed (whole, even when truncated), the run's model,
    shape, tokens counted, warnings, predictions, timings,
    and ``sink_rate``: the share of heads whose first-token score exceeds ``sink_epsilon`` (``lenses.sink_rate``).
    ``n_tokens_text`` is a lower bound when ``truncated`` (only a prefix of a long text is tokenised)."""
    sinks = sink_rate(result.attentions, sink_epsilon, result.sliding_windows)
    return {"generator": GENERATOR, "text": result.text, "model": result.model_label, "device": result.device, "dtype": result.dtype,
            "n_layer": result.n_layer, "n_head": result.n_head, "n_tokens": result.n_tokens,
            "n_tokens_text": result.n_tokens_text, "context_length": result.context_length,
            "bos": result.bos, "truncated": result.truncated, "warnings": list(result.warnings),
            "family": result.family, "causal": result.causal,
            "max_tokens": result.max_tokens,
            "attention_bytes": attention_memory_bytes(result.n_layer, result.n_head, result.n_tokens),
            "predictions": [{"token": p.token, "token_id": p.token_id, "probability": p.probability}
                            for p in result.predictions],
            "prediction_note": result.prediction_note,
            "sink_rate": sinks.rate, "sink_epsilon": sinks.epsilon,
            "timings": {**result.timings, **(timings or {})}}


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


def check_writable_dir(out_dir: Path) -> Path:
    """Create ``out_dir`` if needed and prove a file can be written there; ExportError otherwise."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{_p(out_dir)} is a file, not a folder.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=out_dir, prefix=".attnscope-write-test-", delete=True)
        probe.close()
    except OSError as exc:
        raise ExportError(f"Cannot write to {_p(out_dir)}: {_reason(exc)}.") from None
    return out_dir


# ----------------------------------------------------------------------------- names the file system can hold
def _pathconf(folder: str, name: str, default: int) -> int:
    try:
        value = os.pathconf(folder, name)
    except (AttributeError, OSError, ValueError):
        return default
    return value if value and value > 0 else default


#: The longest path an export writes inside its folder (staging and the earlier export moved aside hold the
#: same): the marker; ``scores_per_text.csv`` and ``heads/L<l>H<h>.png`` are shorter for any model below
#: 10,000 layers and heads.
LONGEST_INNER = max(len(f"/{MARKER}"), len("/scores_per_text.csv"), len("/heads/L9999H9999.png"))


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
HEAD_IMAGE = re.compile(r"heads/L[0-9]+H[0-9]+\.(?:png|svg|pdf)")


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


ImageWriter = Callable[[Path], list[Path]]  # draws images into a folder, returns the files written


def export_bundle(out_dir: Path, result: AttentionResult, scores: HeadScores, parity: ParityReport,
                  image_writer: ImageWriter | None = None, timings: dict | None = None,
                  check: Callable[[], None] | None = None, value_norms: np.ndarray | None = None,
                  sink_epsilon: float = SINK_EPSILON, tl_options: dict | None = None) -> Written:
    """The command line's export folder: attention.npz (with ``rollout``, and ``value_norms`` when given:
    ``lenses.value_norms(loaded, result).value_norms``, which needs the model), scores.csv, scores_tl.csv
    (TransformerLens-style scores with ``tl_options``: ``write_tl_scores_csv``'s keywords, TL's defaults
    when None), parity.json,
    the images (if an ``image_writer`` is given) and summary.json (with the sink rate at ``sink_epsilon``),
    written with :func:`write_folder_atomically` — the folder holds the whole new export or is left as
    it was. ``check()`` is called between files."""
    def step():
        if check is not None:
            check()

    def write(folder: Path) -> None:
        write_attention_npz(result, folder / "attention.npz", value_norms=value_norms,
                            rollout=attention_rollout(result.attentions))
        step()
        write_scores_csv(scores, folder / "scores.csv")
        write_tl_scores_csv(result, folder / "scores_tl.csv", **(tl_options or {}))
        write_json(parity.to_dict(), folder / "parity.json")
        step()
        if image_writer is not None:
            image_writer(folder)
            step()
        write_json(summary(result, timings, sink_epsilon), folder / "summary.json")

    return write_folder_atomically(out_dir, write, check)


# ----------------------------------------------------------------------------- scans over many texts
SCAN_FILES = ("scores_mean.csv", "scores_std.csv", "scores_per_text.csv", "texts.csv", "summary.json")


def write_scan_table(scan: ScanResult, path: Path, which: str = "mean") -> Path:
    """``layer,head,<every score>``, one row per head, the mean (``which="mean"``) or std over texts;
    cells as ``HeadScores.text``: ``n/a`` for a score that does not apply, ``nan`` when no text defines it."""
    scores = {"mean": scan.mean_scores, "std": scan.std_scores}[which]()
    L, H = scores.shape
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["layer", "head", *scan.score_names])
        for layer in range(L):
            for head in range(H):
                writer.writerow([layer, head, *(scores.text(name, layer, head) for name in scan.score_names)])
    return Path(path)


def write_scan_per_text_csv(scan: ScanResult, path: Path) -> Path:
    """Long format: ``text,n_tokens,layer,head,<every score>``, one row per text and head.

    ``text`` is the text's 0-based position among the texts scanned (blank lines skipped)."""
    _, _, L, H = scan.per_text.shape
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "n_tokens", "layer", "head", *scan.score_names])
        for t, n in enumerate(scan.n_tokens):
            scores = scan.text_scores(t)
            for layer in range(L):
                for head in range(H):
                    writer.writerow([t, n, layer, head, *(scores.text(name, layer, head) for name in scan.score_names)])
    return Path(path)


def write_scan_texts_csv(scan: ScanResult, path: Path) -> Path:
    """``text,n_tokens,truncated,chars,source,content``: what each ``text`` number of ``scores_per_text.csv`` is.
    ``chars`` is the whole text's length, ``source`` where it came from (a folder's file name, ``line N`` of a
    file, ``sample line N``; empty for texts not read from a file), ``content`` the part analysed (a cut text up
    to its last analysed token)."""
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "n_tokens", "truncated", "chars", "source", "content"])
        for t, (n, cut, chars, content) in enumerate(zip(scan.n_tokens, scan.truncated, scan.chars, scan.texts)):
            writer.writerow([t, n, int(cut), chars, scan.sources[t] if t < len(scan.sources) else "", content])
    return Path(path)


def write_scan(scan: ScanResult, out_dir: Path, sink_epsilon: float = SINK_EPSILON,
               check: Callable[[], None] | None = None) -> Written:
    """The scan folder (:data:`SCAN_FILES`), written with :func:`write_folder_atomically`: the whole new
    scan or nothing; an earlier AttnScope folder there is replaced as a whole. ``check()`` between files."""
    def write(folder: Path) -> None:
        write_scan_table(scan, folder / "scores_mean.csv", "mean")
        write_scan_table(scan, folder / "scores_std.csv", "std")
        if check is not None:
            check()
        write_scan_per_text_csv(scan, folder / "scores_per_text.csv")
        write_scan_texts_csv(scan, folder / "texts.csv")
        write_json(scan.summary(sink_epsilon), folder / "summary.json")

    return write_folder_atomically(out_dir, write, check)
