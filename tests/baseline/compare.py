"""Compare two recordings of record.py: every file byte for byte, except what varies between two runs of the
same code by nature (the masks below, each with why).

    .venv/bin/python tests/baseline/compare.py BEFORE AFTER

Prints one line per difference (the file, what differs, the largest absolute difference for numbers, arrays
and pixels) and exits 1; or prints "identical: N files" and exits 0. Files only in one recording are
differences. How each kind of file is compared:

- ``*.png``: decoded pixels (Qt's QImage, as RGBA8888): size and every pixel, so another PNG encoder setting
  is not a difference and a changed pixel is; ``PNG_MASKS`` regions are blanked in both first.
- ``*.npz``: bytes (AttnScope writes its zip entries with a fixed time: the same result gives the same bytes);
  when the bytes differ, each array is compared (names, dtype, shape, values) to say what changed.
- ``*.json``: bytes, after the values of ``JSON_MASKED_KEYS`` are replaced by ``"<masked>"`` in the text
  (so key order, spacing and every other number still count); the differing entries are then named.
- ``commands.json``: per command (by name): argv, exit code, stdout and stderr after ``TEXT_MASKS``.
- ``*.pdf``: bytes after ``PDF_MASKS`` (Qt stamps the time and a random document id).
- everything else (CSV, SVG, safetensors, tokenizers, texts): bytes; a CSV says the row, column and the
  largest numeric difference.
- ``recording.json`` is not compared (it says when, where and how long); only its versions are, as a warning.
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import json
import math
import re
import sys
from pathlib import Path

# ----------------------------------------------------------------------------- what is masked, and why
#: JSON keys whose values (a number, or an object of numbers) are masked wherever they occur. All are wall-clock
#: measurements: they differ on every run of the same code, and no output is computed from them.
JSON_MASKED_KEYS = {
    "timings": "export's summary.json: seconds of each step (tokenize_s, forward_s, total_s, load_s, scores_s, "
               "parity_s, value_norms_s)",
    "seconds": "parity.json: the recompute's wall time; scan's summary.json: the scan's wall time",
    "tokens_per_second": "scan's summary.json: tokens / seconds",
    "load_s": "the model's load time (inside timings; masked on its own too, wherever a restructuring moves it)",
}

#: (pattern, replacement, why) applied to every command's stdout and stderr.
TEXT_MASKS = [
    (r"in [0-9.]+ s, [0-9]+ tokens/s", "in <S> s, <N> tokens/s",
     "scan's last line: the scan's wall time and its tokens per second"),
]

#: (file glob, (x0, y0, x1, y1), why): regions of a PNG blanked in both recordings before the pixels are
#: compared. Negative y counts from the bottom. Only the app's window grabs (window.png and the from-scratch
#: tabs, all grabs of the whole window) have them; every other figure is compared whole.
WINDOW_GRABS = ("runs/screenshot-*/window.png", "runs/screenshot-*/scratch-*.png")
PNG_MASKS = [
    *[(g, (0, -24, None, None), "the status bar: 'last run HH:MM:SS in N ms' is the wall clock and the run's "
                                "time, and its width moves the model and token labels beside it") for g in WINDOW_GRABS],
    *[(g, (11, 59, 12, 75), "the text box's blinking cursor (one pixel column at the start of the text): on or "
                            "off depending on when the grab falls in its blink") for g in WINDOW_GRABS],
    ("runs/screenshot-*/scratch-model-vs-manual.png", (290, 540, 980, 574),
     "the two lines 'PASS all N heads: worst max |diff| … (layer, head); worst layer output …; computed in N ms': "
     "the recompute's wall time (gui/tabs/scratch/scratch_parity.py), which wraps the line; the same maxima are in the table "
     "below it, which is compared"),
]

#: (pattern, why) of PDF bytes replaced by a same-length run of '#' before comparing.
PDF_MASKS = [
    (rb"/(?:CreationDate|ModDate) \(D:[0-9]{14}Z\)", "the Info dictionary's creation and modification time"),
    (rb'xmp:(?:CreateDate|ModifyDate|MetadataDate)="[^"]*"', "the XMP metadata's times"),
    (rb'xmpMM:(?:DocumentID|InstanceID)="uuid:[0-9a-f-]+"', "the XMP metadata's random document id"),
    (rb"/ID \[ ?<[0-9a-fA-F]+> ?<[0-9a-fA-F]+> ?\]", "the trailer's /ID (the same random id, hex-encoded)"),
]

NOT_COMPARED = {"recording.json": "when, where and how long the recording took; its versions are compared as a warning"}


# ----------------------------------------------------------------------------- helpers
def mask_json_text(text: str) -> str:
    """The JSON text with every masked key's value replaced by "<masked>" (a number, null, or a flat object)."""
    names = "|".join(map(re.escape, JSON_MASKED_KEYS))
    value = r"(?:\{[^{}]*\}|-?[0-9][0-9.eE+-]*|-?Infinity|NaN|null)"
    return re.sub(rf'("(?:{names})")(\s*:\s*){value}', r'\1\2"<masked>"', text)


def mask_text(text: str) -> str:
    for pattern, replacement, _ in TEXT_MASKS:
        text = re.sub(pattern, replacement, text)
    return text


def number(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def first_line_diff(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: {x[:120]!r} ≠ {y[:120]!r}"
    return f"{len(la)} lines ≠ {len(lb)} lines" if len(la) != len(lb) else "line endings or trailing bytes"


def json_diffs(a, b, path="$", out=None, limit=5):
    """[(path, a, b, |Δ| or None)] of the first ``limit`` differing leaves."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            out.append((path + " keys", list(a), list(b), None))
        for k in a:
            if k in b:
                json_diffs(a[k], b[k], f"{path}.{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((path + " length", len(a), len(b), None))
        for i, (x, y) in enumerate(zip(a, b)):
            json_diffs(x, y, f"{path}[{i}]", out, limit)
    elif a != b or type(a) is not type(b):
        na, nb = number(a), number(b)
        delta = abs(na - nb) if (na is not None and nb is not None and not isinstance(a, bool)
                                 and math.isfinite(na) and math.isfinite(nb)) else None
        out.append((path, a, b, delta))
    return out


def max_numeric_delta(pairs) -> float | None:
    deltas = [d for *_, d in pairs if d is not None]
    return max(deltas) if deltas else None


def fmt(pairs) -> str:
    shown = "; ".join(f"{p}: {str(x)[:60]} ≠ {str(y)[:60]}" for p, x, y, _ in pairs[:3])
    d = max_numeric_delta(pairs)
    return shown + (f" (max |Δ| {d:.3g})" if d is not None else "")


# ----------------------------------------------------------------------------- per kind of file
def compare_png(rel: str, a: Path, b: Path) -> str | None:
    import numpy as np
    from PySide6.QtGui import QImage

    def pixels(path):
        image = QImage(str(path))
        if image.isNull():
            return None
        image = image.convertToFormat(QImage.Format.Format_RGBA8888)
        w, h, line = image.width(), image.height(), image.bytesPerLine()
        raw = np.frombuffer(image.constBits(), np.uint8, count=image.sizeInBytes()).reshape(h, line)
        return raw[:, :w * 4].reshape(h, w, 4).astype(np.int16)

    pa, pb = pixels(a), pixels(b)
    if pa is None or pb is None:
        return None if a.read_bytes() == b.read_bytes() else "not a readable PNG, and the bytes differ"
    if pa.shape != pb.shape:
        return f"size {pa.shape[1]}×{pa.shape[0]} ≠ {pb.shape[1]}×{pb.shape[0]}"
    for glob, (x0, y0, x1, y1), _ in PNG_MASKS:
        if fnmatch.fnmatch(rel, glob):
            h = pa.shape[0]
            ys = slice(y0 + h if y0 < 0 else y0, None if y1 is None else (y1 + h if y1 < 0 else y1))
            pa[ys, x0:x1] = 0
            pb[ys, x0:x1] = 0
    diff = np.abs(pa - pb).max(axis=-1)
    if not diff.any():
        return None
    ys, xs = np.nonzero(diff)
    return (f"{len(ys)} pixels differ (max |Δ| {int(diff.max())} of 255) in x {xs.min()}–{xs.max()}, "
            f"y {ys.min()}–{ys.max()}")


def compare_npz(a: Path, b: Path) -> str | None:
    if a.read_bytes() == b.read_bytes():
        return None
    import numpy as np

    try:
        za, zb = np.load(a, allow_pickle=False), np.load(b, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001: a broken file is a difference, said as such
        return f"bytes differ, and it cannot be read as npz ({type(exc).__name__}: {exc})"
    with za, zb:
        if sorted(za.files) != sorted(zb.files):
            return f"arrays {sorted(za.files)} ≠ {sorted(zb.files)}"
        problems = []
        for name in za.files:
            x, y = za[name], zb[name]
            if x.dtype != y.dtype or x.shape != y.shape:
                problems.append(f"{name}: {x.dtype}{list(x.shape)} ≠ {y.dtype}{list(y.shape)}")
            elif not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
                if x.dtype.kind in "fciu":
                    d = np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64)))
                    problems.append(f"{name}: {int((x != y).sum())} values differ (max |Δ| {d:.3g})")
                else:
                    problems.append(f"{name}: {int((x != y).sum())} entries differ")
        if not problems:
            return "bytes differ, every array equal (the zip container changed: entry order, times or compression)"
        return "; ".join(problems)


def compare_json(a: Path, b: Path) -> str | None:
    ta, tb = (mask_json_text(p.read_text(encoding="utf-8", errors="backslashreplace")) for p in (a, b))
    if ta == tb:
        return None
    try:
        pairs = json_diffs(json.loads(ta), json.loads(tb))
    except ValueError:
        return first_line_diff(ta, tb)
    return fmt(pairs) if pairs else f"formatting: {first_line_diff(ta, tb)}"


def compare_csv(a: Path, b: Path) -> str | None:
    ba, bb = a.read_bytes(), b.read_bytes()
    if ba == bb:
        return None
    ra = list(csv.reader(io.StringIO(ba.decode("utf-8", "backslashreplace"))))
    rb = list(csv.reader(io.StringIO(bb.decode("utf-8", "backslashreplace"))))
    if len(ra) != len(rb):
        return f"{len(ra)} rows ≠ {len(rb)} rows"
    header, cells, deltas = ra[0] if ra else [], [], []
    for i, (x, y) in enumerate(zip(ra, rb)):
        if len(x) != len(y):
            cells.append(f"row {i}: {len(x)} columns ≠ {len(y)}")
            continue
        for j, (u, v) in enumerate(zip(x, y)):
            if u != v:
                col = header[j] if j < len(header) else j
                cells.append(f"row {i} {col}: {u[:40]} ≠ {v[:40]}")
                nu, nv = number(u), number(v)
                if nu is not None and nv is not None and math.isfinite(nu) and math.isfinite(nv):
                    deltas.append(abs(nu - nv))
    if not cells:
        return f"bytes differ ({first_line_diff(ba.decode('utf-8', 'replace'), bb.decode('utf-8', 'replace'))})"
    return (f"{len(cells)} cells differ: {'; '.join(cells[:3])}"
            + (f" (max |Δ| {max(deltas):.3g})" if deltas else ""))


def compare_pdf(a: Path, b: Path) -> str | None:
    def masked(data: bytes) -> bytes:
        for pattern, _ in PDF_MASKS:
            data = re.sub(pattern, lambda m: b"#" * len(m.group(0)), data)
        return data

    ma, mb = masked(a.read_bytes()), masked(b.read_bytes())
    if ma == mb:
        return None
    if len(ma) != len(mb):
        return f"{len(ma)} bytes ≠ {len(mb)} bytes (after masking the time and id)"
    at = next(i for i, (x, y) in enumerate(zip(ma, mb)) if x != y)
    return f"bytes differ from offset {at}: {ma[at:at + 40]!r} ≠ {mb[at:at + 40]!r}"


def compare_bytes(a: Path, b: Path) -> str | None:
    ba, bb = a.read_bytes(), b.read_bytes()
    if ba == bb:
        return None
    try:
        return first_line_diff(ba.decode("utf-8"), bb.decode("utf-8"))
    except UnicodeDecodeError:
        at = next((i for i, (x, y) in enumerate(zip(ba, bb)) if x != y), min(len(ba), len(bb)))
        return f"{len(ba)} bytes ≠ {len(bb)} bytes; first difference at offset {at}"


def compare_commands(a: Path, b: Path) -> list[str]:
    da, db = (json.loads(p.read_text(encoding="utf-8")) for p in (a, b))
    found = []
    env_a, env_b = da.get("environment", {}), db.get("environment", {})
    if env_a != env_b:
        keys = sorted(k for k in set(env_a) | set(env_b) if env_a.get(k) != env_b.get(k))
        found.append(f"commands.json: environment differs in {', '.join(keys)}")
    ca = {c["name"]: c for c in da["commands"]}
    cb = {c["name"]: c for c in db["commands"]}
    for name in ca.keys() - cb.keys():
        found.append(f"commands.json: {name}: only in A")
    for name in cb.keys() - ca.keys():
        found.append(f"commands.json: {name}: only in B")
    for name in (n for n in ca if n in cb):
        x, y = ca[name], cb[name]
        if x["argv"] != y["argv"]:
            found.append(f"commands.json: {name}: argv {x['argv']} ≠ {y['argv']}")
        if x["returncode"] != y["returncode"]:
            found.append(f"commands.json: {name}: exit code {x['returncode']} ≠ {y['returncode']}")
        for stream in ("stdout", "stderr"):
            sa, sb = mask_text(x[stream]), mask_text(y[stream])
            if sa != sb:
                found.append(f"commands.json: {name}: {stream} {first_line_diff(sa, sb)}")
    return found


def compare(a_root: Path, b_root: Path) -> tuple[int, list[str]]:
    def files(root):
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}

    fa, fb = files(a_root), files(b_root)
    found = [f"{rel}: only in A" for rel in sorted(fa - fb)] + [f"{rel}: only in B" for rel in sorted(fb - fa)]
    n = 0
    for rel in sorted(fa & fb):
        if rel in NOT_COMPARED:
            continue
        a, b = a_root / rel, b_root / rel
        n += 1
        if a.is_symlink() or b.is_symlink():
            problem = None if (a.is_symlink() and b.is_symlink() and a.readlink() == b.readlink()) else "a link differs"
        elif rel == "commands.json":
            found += compare_commands(a, b)
            continue
        else:
            suffix = a.suffix.lower()
            problem = {".png": lambda: compare_png(rel, a, b), ".npz": lambda: compare_npz(a, b),
                       ".json": lambda: compare_json(a, b), ".csv": lambda: compare_csv(a, b),
                       ".pdf": lambda: compare_pdf(a, b)}.get(suffix, lambda: compare_bytes(a, b))()
        if problem:
            found.append(f"{rel}: {problem}")
    return n, found


def version_warnings(a_root: Path, b_root: Path) -> list[str]:
    """What recording.json says that explains a difference without any code change: other versions of the
    libraries, another base folder (the model folders' paths are in summary.json and in every figure's title),
    other model folders (built by another generator instead of copied with --models)."""
    try:
        ra, rb = (json.loads((r / "recording.json").read_text(encoding="utf-8")) for r in (a_root, b_root))
    except (OSError, ValueError):
        return ["warning: a recording.json is missing or unreadable: the versions are not known"]
    va, vb = ra.get("versions", {}), rb.get("versions", {})
    found = [f"warning: {k} {va.get(k)} ≠ {vb.get(k)}: a difference may come from the environment, not the code"
             for k in sorted(set(va) | set(vb)) if va.get(k) != vb.get(k)]
    if ra.get("base") and rb.get("base") and ra["base"] != rb["base"]:
        found.append(f"warning: recorded in different --base folders ({ra.get('base')} ≠ {rb.get('base')}): the "
                     "model folders' paths differ in summary.json and in every figure's title")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args()
    for root in (args.a, args.b):
        if not (root / "commands.json").is_file():
            parser.error(f"{root} is not a recording (no commands.json)")
    for warning in version_warnings(args.a, args.b):
        print(warning, file=sys.stderr)
    n, found = compare(args.a, args.b)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} difference(s) in {n} files compared", file=sys.stderr)
        return 1
    print(f"identical: {n} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
