"""The GGUF files already on this computer: where other tools keep them, found without reading their data.

The places looked in, in this order (the first place that finds a file names it; a file seen again through
another place or a link is listed once):

    where      folder                                          layout, and how an entry is named
    HF cache   $HF_HUB_CACHE, else $HF_HOME/hub, else          models--org--name/snapshots/<rev>/**.gguf,
               $XDG_CACHE_HOME/huggingface/hub, else           named ``org/name/<file>``
               ~/.cache/huggingface/hub
    llama.cpp  $LLAMA_CACHE, else $XDG_CACHE_HOME/llama.cpp,   flat ``*.gguf``, named by the file
               else ~/.cache/llama.cpp
    LM Studio  ~/.lmstudio/models, ~/.cache/lm-studio/models   <publisher>/<repo>/*.gguf, named
               (older)                                         ``publisher/repo/<file>``
    Ollama     $OLLAMA_MODELS, else ~/.ollama/models; and      manifests/<registry>/<namespace>/<model>/<tag>
               /usr/share/ollama/.ollama/models (Linux's       → blobs/sha256-<hex>, named ``model:tag``
               system service)
    folder     each folder the caller adds (the app's *Model   any depth up to MAX_DEPTH, named by the path
               folders*, ``main.py models --folder``)          under the folder

``ATTNSCOPE_SCAN_HOME`` set to a folder: the default places are looked for under it instead of the home folder,
and the environment variables above and /usr/share/ollama are not consulted (the tests point it at a folder
that is not there, so no test looks at the user's own files). :func:`default_places` also takes the environment,
the home folder and the system Ollama folder as parameters.

An Ollama manifest names its model layer (mediaType ``application/vnd.ollama.image.model``) by a digest
``sha256:<hex>``, the blob ``blobs/sha256-<hex>``; projector and adapter layers are not models and are not
listed; a manifest whose blob is missing is listed greyed, saying so. A split GGUF (``…-00001-of-00003.gguf``)
is one entry, greyed: transformers reads one file (``load_gguf_checkpoint`` opens a single GGUFReader).

Each file becomes a frozen :class:`FoundGguf` (name, path, size, quantization, where, and ``problem``: the
sentence :func:`~analysis.model.gguf_file.inspect_gguf` gives when AttnScope cannot open it, or None).
Headers are read once: what was read is kept in ``user_cache_dir()/gguf-files.json``, keyed by the file's real
path, size and modification time (ns), so a scan reads only new or changed files; the cache is dropped when
the reader's version (this module's, transformers') changes. Nothing here raises for a bad file or folder:
what cannot be listed is skipped silently, what is found but cannot be read is listed with the reason.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Mapping

from .user_cache import user_cache_dir

#: the places, in order: a file found in two is named by the first
WHERE = ("HF cache", "llama.cpp", "LM Studio", "Ollama", "folder")
SCAN_HOME = "ATTNSCOPE_SCAN_HOME"
SYSTEM_OLLAMA = Path("/usr/share/ollama/.ollama/models")
CACHE_NAME = "gguf-files.json"
CACHE_FORMAT = 3  # raise when what is cached, or how a problem is worded, changes
#: limits of a walk through one place: folder levels below it, directory entries looked at, files listed
MAX_DEPTH = 8
MAX_ENTRIES = 100_000
MAX_FILES = 2_000
MAX_CACHED = 10_000  # entries kept in the cache file (the most recently seen)

OLLAMA_MODEL = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY, OLLAMA_LIBRARY = "registry.ollama.ai", "library"
MAX_MANIFEST = 1 << 20  # bytes: a manifest is a few hundred
SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
SPLIT_PROBLEM = ("{name} is a split GGUF file ({count} parts{missing}); AttnScope opens one-file GGUFs only "
                 "(transformers reads a single file): merge the parts with llama.cpp's llama-gguf-split --merge, "
                 "then open the merged file.")


@dataclass(frozen=True)
class Place:
    """A folder to look in: ``where`` (one of :data:`WHERE`), ``path``, and its ``layout``: ``hf`` (a Hugging
    Face hub cache), ``ollama`` (Ollama's models folder), or ``files`` (``.gguf`` files up to ``depth`` folder
    levels down; 0: the folder itself only)."""

    where: str
    path: Path
    layout: str = "files"
    depth: int = MAX_DEPTH


@dataclass(frozen=True)
class FoundGguf:
    """One model file found. ``name``: what the list shows (``org/name/file.gguf``, ``llama3.2:1b``);
    ``path``: the absolute path to open (the first part of a split file; Ollama's blob, which has no
    ``.gguf`` suffix); ``size`` in bytes (all parts of a split file; a missing Ollama blob: the size its
    manifest states); ``quantization`` as llama.cpp names it (``Q4_K_M``; "" when the header cannot be read);
    ``where``: one of :data:`WHERE`; ``problem``: why AttnScope cannot open it (one sentence), or None;
    ``title``: the file's ``general.name``; ``architecture`` as the file states it; ``parts``: files in it."""

    name: str
    path: str
    size: int
    quantization: str
    where: str
    problem: str | None = None
    title: str = ""
    architecture: str = ""
    parts: int = 1

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def label(self) -> str:
        """The line the Model list shows: ``name · 1.21 GiB · Q4_K_M · Ollama`` (no quantization when unknown)."""
        return " · ".join(part for part in (self.name, short_bytes(self.size), self.quantization, self.where) if part)

    def to_dict(self) -> dict:
        return asdict(self)


def short_bytes(n: int) -> str:
    """A file's size for a list, in binary units as everywhere in AttnScope (1 KiB = 1,024 bytes), to three
    significant digits: ``512 bytes``, ``45.2 KiB``, ``808 MiB``, ``1.21 GiB`` (a value that would round to
    1,000 is shown in the next unit: 999.9 KiB is ``0.976 MiB``)."""
    if n < 1024:
        return f"{n:,} bytes"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if value < 999.5:
            break
        value, unit = value / 1024, bigger
    digits = 3 if value < 0.9995 else 2 if value < 9.995 else 1 if value < 99.95 else 0
    return f"{value:,.{digits}f} {unit}"


# ----------------------------------------------------------------------------- the places
def default_places(environ: Mapping[str, str] | None = None, home: str | Path | None = None,
                   system_ollama: Path | None = SYSTEM_OLLAMA) -> tuple[Place, ...]:
    """The places other tools keep GGUF files (the table in the module docstring), from ``environ`` (the
    process's) and ``home`` (the home folder). With ``ATTNSCOPE_SCAN_HOME`` in ``environ``, that folder is the
    home and no variable nor ``system_ollama`` is read. Places that do not exist are listed too (a scan skips
    them)."""
    env = dict(os.environ if environ is None else environ)
    if env.get(SCAN_HOME):
        home, env, system_ollama = Path(env[SCAN_HOME]).expanduser(), {}, None
    home = Path(home).expanduser() if home is not None else Path.home()
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else home / ".cache"
    if env.get("HF_HUB_CACHE"):
        hf = Path(env["HF_HUB_CACHE"])
    elif env.get("HF_HOME"):
        hf = Path(env["HF_HOME"]) / "hub"
    else:
        hf = cache / "huggingface" / "hub"
    llama = Path(env["LLAMA_CACHE"]) if env.get("LLAMA_CACHE") else cache / "llama.cpp"
    ollama = [Path(env["OLLAMA_MODELS"])] if env.get("OLLAMA_MODELS") else [home / ".ollama" / "models"]
    if system_ollama is not None:
        ollama.append(system_ollama)
    return (Place("HF cache", hf.expanduser(), "hf"),
            Place("llama.cpp", llama.expanduser(), "files", depth=0),
            Place("LM Studio", home / ".lmstudio" / "models", "files", depth=3),
            Place("LM Studio", cache / "lm-studio" / "models", "files", depth=3),
            *(Place("Ollama", p.expanduser(), "ollama") for p in ollama))


def folder_places(folders) -> tuple[Place, ...]:
    """Folders the user added, walked to :data:`MAX_DEPTH` levels."""
    return tuple(Place("folder", Path(str(f)).expanduser(), "files") for f in folders if str(f).strip())


# ----------------------------------------------------------------------------- walking a folder
def _walk(root: Path, depth: int, cancel=None) -> Iterator[Path]:
    """The ``.gguf`` files under ``root`` (``depth`` levels down at most), at most MAX_FILES of them after at
    most MAX_ENTRIES directory entries. Links are followed, each folder entered once (a link loop ends there);
    hidden names (``.git``, ``._x.gguf``) and folders that cannot be read are skipped."""
    seen: set[tuple[int, int]] = set()
    stack, entries, found = [(root, 0)], 0, 0
    while stack:
        if cancel is not None and cancel.is_set():
            return
        folder, level = stack.pop()
        try:
            st = folder.stat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(folder) as it:
                listing = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subfolders = []
        for entry in listing:
            entries += 1
            if entries > MAX_ENTRIES:
                return
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():
                    if level < depth:
                        subfolders.append((Path(entry.path), level + 1))
                elif entry.name.lower().endswith(".gguf") and entry.is_file():
                    found += 1
                    if found > MAX_FILES:
                        return
                    yield Path(entry.path)
            except OSError:
                continue
        stack.extend(reversed(subfolders))  # depth first, in name order


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


# ----------------------------------------------------------------------------- one file
@dataclass(frozen=True)
class _Header:
    """What is kept of one file's header: the problem as worded for the file's real name ``read_as``."""

    title: str
    architecture: str
    quantization: str
    problem: str | None
    read_as: str


def _read(real: Path) -> _Header:
    """Read the header of ``real``; never raises (what cannot be read is the problem)."""
    from .gguf_file import GgufFileError, inspect_gguf

    try:
        info = inspect_gguf(real)
    except GgufFileError as exc:
        return _Header("", "", "", str(exc), real.name)
    except Exception as exc:  # a reader bug must not hide the other files
        return _Header("", "", "", f"{real.name} cannot be read ({type(exc).__name__}).", real.name)
    return _Header(info.name, info.architecture, info.quantization, info.problem, real.name)


def _renamed(problem: str | None, read_as: str, shown: str) -> str | None:
    """The problem's sentence naming the file as the list shows it (it starts with the name it was read as)."""
    if problem and problem.startswith(read_as) and read_as != shown:
        return shown + problem[len(read_as):]
    return problem


class _Headers:
    """Headers by (real path, size, mtime_ns): the cache file's, then each one read anew (counted in ``read``)."""

    def __init__(self, cache_file: Path | None):
        self.cache_file, self.read, self.entries = cache_file, 0, {}
        self.seen: set[str] = set()
        self.exists = cache_file is not None and cache_file.is_file()
        if cache_file is not None:
            self.entries = _load_cache(cache_file)

    def get(self, real: Path, size: int, mtime_ns: int) -> _Header:
        key = str(real)
        self.seen.add(key)
        entry = self.entries.get(key)
        if entry is not None and entry.get("size") == size and entry.get("mtime_ns") == mtime_ns:
            try:
                return _Header(str(entry["title"]), str(entry["architecture"]), str(entry["quantization"]),
                               entry["problem"] if isinstance(entry["problem"], str) else None, str(entry["read_as"]))
            except (KeyError, TypeError):
                pass
        header = _read(real)
        self.read += 1
        self.entries[key] = {"size": size, "mtime_ns": mtime_ns, **asdict(header)}
        return header

    def save(self) -> None:
        if self.cache_file is None:
            return
        keep = {k: v for k, v in self.entries.items() if k in self.seen or os.path.exists(k)}
        if self.exists and self.read == 0 and len(keep) == len(self.entries):
            return  # nothing new to write
        seen_first = sorted(keep, key=lambda k: k not in self.seen)[:MAX_CACHED]
        _save_cache(self.cache_file, {k: keep[k] for k in seen_first})


def _reader_stamp() -> str:
    """What the cached problems depend on: this module's cache format and transformers' version (its table of
    the storage types it can dequantize). Read from the package metadata: transformers is not imported."""
    try:
        from importlib.metadata import version

        transformers = version("transformers")
    except Exception:
        transformers = "none"
    return f"{CACHE_FORMAT}/transformers {transformers}"


def _load_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("reader") != _reader_stamp() or not isinstance(data.get("files"), dict):
        return {}
    return {k: v for k, v in data["files"].items() if isinstance(v, dict)}


def _save_cache(path: Path, files: dict) -> None:
    """Write the cache whole or not at all (a temporary file of its own renamed over it, so two scans writing at
    once leave one whole file); a cache that cannot be written (read-only, full disk) is left as it was: the
    next scan reads the headers again."""
    import tempfile

    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"reader": _reader_stamp(), "files": files}, f, ensure_ascii=False)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _stat(path: Path):
    """(real path, size, mtime_ns) of the file ``path`` names (links followed), or None when it is not there."""
    try:
        real = Path(os.path.realpath(path))
        st = real.stat()
    except (OSError, ValueError):
        return None
    return real, st.st_size, st.st_mtime_ns


def _found(name: str, path: Path, where: str, headers: _Headers, shown_file: str | None = None) -> FoundGguf | None:
    stat = _stat(path)
    if stat is None:
        return None
    real, size, mtime = stat
    h = headers.get(real, size, mtime)
    return FoundGguf(name, str(path.absolute()), size, h.quantization, where,
                     _renamed(h.problem, h.read_as, shown_file or path.name), h.title, h.architecture)


def _split_groups(files: list[Path]) -> tuple[list[Path], dict[tuple[Path, str, int], list[tuple[int, Path]]]]:
    """Files that are whole, and the parts of split files grouped by (folder, stem, count)."""
    whole, groups = [], {}
    for f in files:
        m = SPLIT.match(f.name)
        if m and int(m["count"]) > 1:
            groups.setdefault((f.parent, m["stem"], int(m["count"])), []).append((int(m["part"]), f))
        else:
            whole.append(f)
    return whole, groups


def _split_found(name: str, parts: list[tuple[int, Path]], count: int, where: str, headers: _Headers) -> FoundGguf:
    parts = sorted(parts)
    first = parts[0][1]
    one = _found(name, first, where, headers) if parts[0][0] == 1 else None
    size = sum(s[1] for s in (_stat(p) for _, p in parts) if s is not None)
    missing = sorted(set(range(1, count + 1)) - {n for n, _ in parts})
    missing_text = (f", part{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing[:5]))}"
                    f"{'…' if len(missing) > 5 else ''} not found beside it") if missing else ""
    problem = SPLIT_PROBLEM.format(name=first.name, count=count, missing=missing_text)
    return FoundGguf(name, str(first.absolute()), size, one.quantization if one else "", where, problem,
                     one.title if one else "", one.architecture if one else "", parts=len(parts))


def _files_found(files: list[Path], where: str, headers: _Headers, name_of) -> list[FoundGguf]:
    """Each whole file and each split file of ``files`` (``name_of(path)``: the name the list shows)."""
    whole, groups = _split_groups(files)
    out = [found for f in whole if (found := _found(name_of(f), f, where, headers)) is not None]
    for (_, _, count), parts in groups.items():
        first = sorted(parts)[0][1]
        out.append(_split_found(name_of(first), parts, count, where, headers))
    return out


# ----------------------------------------------------------------------------- each layout
def _scan_files(place: Place, headers: _Headers, cancel) -> list[FoundGguf]:
    root = place.path

    def name_of(f: Path) -> str:
        return f.relative_to(root).as_posix() if place.where != "llama.cpp" else f.name

    return _files_found(list(_walk(root, place.depth, cancel)), place.where, headers, name_of)


def _hf_revision(repo: Path) -> str | None:
    try:
        return (repo / "refs" / "main").read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _scan_hf(place: Place, headers: _Headers, cancel) -> list[FoundGguf]:
    """``models--org--name/snapshots/<rev>/**.gguf``: each file once per repository (the revision ``refs/main``
    names first, then the newest snapshot)."""
    out = []
    try:
        repos = sorted(p for p in place.path.iterdir() if p.name.startswith("models--") and _is_dir(p))
    except OSError:
        return out
    for repo in repos:
        if cancel is not None and cancel.is_set():
            break
        repo_id = repo.name[len("models--"):].replace("--", "/")
        try:
            snapshots = [s for s in (repo / "snapshots").iterdir() if _is_dir(s)]
        except OSError:
            continue
        main = _hf_revision(repo)

        def newest_first(s: Path):
            try:
                return (s.name != main, -s.stat().st_mtime_ns, s.name)
            except OSError:
                return (True, 0, s.name)

        by_name: dict[str, Path] = {}
        for snapshot in sorted(snapshots, key=newest_first):
            for f in _walk(snapshot, MAX_DEPTH, cancel):
                by_name.setdefault(f.relative_to(snapshot).as_posix(), f)
        rel = {f: r for r, f in by_name.items()}
        out += _files_found(list(by_name.values()), place.where, headers, lambda f: f"{repo_id}/{rel[f]}")
    return out


def _ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """As ``ollama list`` names a model: ``llama3.2:1b``, ``user/model:tag``, ``hf.co/org/repo:Q4_K_M``."""
    if registry == OLLAMA_REGISTRY:
        return f"{model}:{tag}" if namespace == OLLAMA_LIBRARY else f"{namespace}/{model}:{tag}"
    return f"{registry}/{namespace}/{model}:{tag}"


def _model_digest(manifest: Path) -> tuple[str | None, int, bool]:
    """(the model layer's digest, its stated size, whether the manifest could be read)."""
    try:
        if manifest.stat().st_size > MAX_MANIFEST:
            return None, 0, False
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None, 0, False
    layers = data.get("layers") if isinstance(data, dict) else None
    for layer in layers if isinstance(layers, list) else ():
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL and isinstance(layer.get("digest"), str):
            size = layer.get("size")
            return layer["digest"], size if isinstance(size, int) and size >= 0 else 0, True
    return None, 0, True


def _ollama_blob(blobs: Path, digest: str) -> Path | None:
    """The file of a manifest's ``sha256:<hex>`` digest in Ollama's ``blobs`` folder (``sha256-<hex>``, or the
    older ``sha256:<hex>``), or None when it is not there or the digest is not a SHA-256."""
    hexdigits = digest.split(":", 1)[-1]
    if not re.fullmatch(r"[0-9a-fA-F]{64}", hexdigits):
        return None
    return next((b for b in (blobs / f"sha256-{hexdigits}", blobs / f"sha256:{hexdigits}") if b.is_file()), None)


def _scan_ollama(place: Place, headers: _Headers, cancel) -> list[FoundGguf]:
    out = []
    manifests, blobs = place.path / "manifests", place.path / "blobs"
    for manifest in _manifests(manifests, cancel):
        parts = manifest.relative_to(manifests).parts
        name = _ollama_name(*parts)
        digest, stated, readable = _model_digest(manifest)
        if not readable:
            out.append(FoundGguf(name, str(manifest.absolute()), 0, "", place.where,
                                 f"{name}: its Ollama manifest ({manifest}) cannot be read; pull the model again "
                                 f"(ollama pull {name})."))
            continue
        if digest is None:
            continue  # no model layer: not a model
        hexdigits = digest.split(":", 1)[-1]
        blob = _ollama_blob(blobs, digest)
        if blob is None:
            out.append(FoundGguf(name, str((blobs / f"sha256-{hexdigits}").absolute()), stated, "", place.where,
                                 f"{name}: its model file (blobs/sha256-{hexdigits[:12]}…) is missing from Ollama's "
                                 f"folder; pull it again (ollama pull {name})."))
            continue
        found = _found(name, blob, place.where, headers, shown_file=name)
        if found is not None:
            out.append(found)
    return out


OLLAMA_NAME = re.compile(r"^(?:(?P<registry>[\w.\-]+)/(?=[\w.\-]+/))?(?:(?P<namespace>[\w.\-]+)/)?"
                         r"(?P<model>[\w.\-]+):(?P<tag>[\w.\-]+)$")


def ollama_model(name: str, environ: Mapping[str, str] | None = None) -> tuple[Path | None, str | None]:
    """``(blob, problem)`` for a model as ``ollama list`` names it (``llama3.2:1b``, ``user/model:tag``,
    ``hf.co/org/repo:Q4_K_M``): the blob its manifest's model layer names, in the first Ollama folder of
    :func:`default_places` that has the manifest; else None and the sentence saying why."""
    match = OLLAMA_NAME.match(name.strip())
    if not match:
        return None, None
    registry = match["registry"] or OLLAMA_REGISTRY
    namespace = match["namespace"] or OLLAMA_LIBRARY
    places = [p for p in default_places(environ) if p.layout == "ollama"]
    for place in places:
        manifest = place.path / "manifests" / registry / namespace / match["model"] / match["tag"]
        if not manifest.is_file():
            continue
        digest, _, readable = _model_digest(manifest)
        if not readable or digest is None:
            return None, f"{name}: its Ollama manifest ({manifest}) names no model file; pull it again (ollama pull {name})."
        blob = _ollama_blob(place.path / "blobs", digest)
        if blob is None:
            return None, (f"{name}: its model file (blobs/sha256-{digest.split(':', 1)[-1][:12]}…) is missing from "
                          f"Ollama's folder; pull it again (ollama pull {name}).")
        return blob, None
    return None, (f"No Ollama model named {name} here (looked in {', '.join(str(p.path) for p in places)}); "
                  "`main.py models` lists the models found.")


def _manifests(root: Path, cancel) -> Iterator[Path]:
    """The files ``<registry>/<namespace>/<model>/<tag>`` under ``root`` (exactly four levels down)."""
    def level(folder: Path, depth: int) -> Iterator[Path]:
        if cancel is not None and cancel.is_set():
            return
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if depth < 3 and entry.is_dir():
                    yield from level(entry, depth + 1)
                elif depth == 3 and entry.is_file():
                    yield entry
            except OSError:
                continue

    yield from level(root, 0)


_LAYOUTS = {"files": _scan_files, "hf": _scan_hf, "ollama": _scan_ollama}


# ----------------------------------------------------------------------------- the scan
@dataclass(frozen=True)
class ScanResult:
    """What a scan found (``files``, in the order of the places, by name within each), the places that exist
    (``looked_in``), and how many headers it read (``read``: the others came from the cache)."""

    files: tuple[FoundGguf, ...]
    looked_in: tuple[Place, ...]
    read: int


def scan(places, cache_file: Path | None | bool = True, cancel=None) -> ScanResult:
    """Look in ``places`` (:func:`default_places` + :func:`folder_places`) for GGUF files. ``cache_file``: True
    for ``user_cache_dir()/gguf-files.json``, a path, or None for no cache. ``cancel`` (a threading.Event):
    set, the scan stops at its next folder and returns what it found (the cache keeps what was read).
    Never raises for a bad file or folder."""
    if cache_file is True:
        cache_file = user_cache_dir() / CACHE_NAME
    headers = _Headers(cache_file or None)
    found: list[FoundGguf] = []
    looked: list[Place] = []
    real_seen: set[str] = set()
    for place in places:
        if cancel is not None and cancel.is_set():
            break
        if not _is_dir(place.path):
            continue
        looked.append(place)
        here = sorted(_LAYOUTS[place.layout](place, headers, cancel), key=lambda f: (f.name.lower(), f.name))
        mine: set[str] = set()
        for f in here:
            real = os.path.realpath(f.path)
            if real in real_seen and real not in mine:
                continue  # found in an earlier place (a link, a folder inside another)
            if real in mine and place.layout != "ollama":
                continue  # one file twice in a place; Ollama's tags of one blob are each listed
            mine.add(real)
            found.append(f)
        real_seen |= mine
    headers.save()
    return ScanResult(tuple(found), tuple(looked), headers.read)


def find_gguf_files(folders=(), environ: Mapping[str, str] | None = None, cancel=None,
                    cache_file: Path | None | bool = True) -> ScanResult:
    """:func:`scan` of the default places and ``folders``."""
    return scan(default_places(environ) + folder_places(folders), cache_file, cancel)
