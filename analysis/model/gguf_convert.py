"""A GGUF file as a model folder: dequantized once by transformers, kept in the user's cache, loaded like any folder.

transformers reads a GGUF (``from_pretrained(folder, gguf_file=NAME)``) by dequantizing every tensor to float32 —
15 s for SmolLM2-135M's 93 MB file here, every time. :func:`converted_folder` does that once and saves the result
(safetensors, config, tokenizer, chat template) under ``user_cache_dir()/gguf/``; later opens load the folder
(~0.5 s) through the same checks as any folder (``loading.load_model``). The numbers are the same: the folder
holds exactly the float32 tensors transformers made of the file (a test compares the two).

Never stale: a converted folder is named by the file's SHA-256 digest, the transformers version that converted
it and the folder's :data:`FORMAT`. ``index.json`` remembers each file's digest by (path, size, mtime): a file whose size or mtime changed is
hashed again, so a changed file maps to a new folder; a copy of a file with the same bytes reuses the folder.
A converted folder is written under a temporary name and renamed when complete: an interrupted conversion leaves
nothing that a later open would take for a model.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

from ..errors import ModelLoadError, WeightsMismatchError, one_line
from .gguf_file import GgufFileError, GgufInfo, check_gguf
from .hub import DownloadCancelled as ConversionCancelled  # one "cancelled" type for every load, whatever it did
from .hub import LONG_STEP, ProgressCallback
from .user_cache import user_cache_dir

SOURCE_FILE = "attnscope-gguf.json"  # in a converted folder: what it was converted from
#: Raised when what a converted folder holds changes (a new config key): older conversions are then not used.
FORMAT = 2


def cache_root() -> Path:
    return user_cache_dir() / "gguf"


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def file_digest(path: Path, progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> str:
    """The SHA-256 of the file's bytes, read in 8 MiB chunks (``progress("checking the file", done, total)``)."""
    digest, total, done = hashlib.sha256(), path.stat().st_size, 0
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            if cancel is not None and cancel.is_set():
                raise ConversionCancelled("Loading cancelled.")
            digest.update(chunk)
            done += len(chunk)
            if progress:
                progress("checking the file", done, total)
    return digest.hexdigest()


def _index_path() -> Path:
    return cache_root() / "index.json"


def _read_index() -> dict:
    try:
        data = json.loads(_index_path().read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def known_digest(path: Path, progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> str:
    """The file's digest: from ``index.json`` when its size and mtime are those recorded, else computed (and
    recorded)."""
    stat = path.stat()
    key = str(path.resolve())
    entry = _read_index().get(key)
    if isinstance(entry, dict) and entry.get("size") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns \
            and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = file_digest(path, progress, cancel)
    try:
        cache_root().mkdir(parents=True, exist_ok=True)
        index = _read_index()
        index[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
        _write_json(_index_path(), index)
    except OSError:
        pass  # a read-only cache only costs the hash next time
    return digest


def folder_for(digest: str) -> Path:
    """Where the conversion of the file with this digest, by this transformers and this :data:`FORMAT`, lives."""
    return cache_root() / f"{digest[:32]}-transformers-{_transformers_version()}-v{FORMAT}"


def is_complete(folder: Path) -> bool:
    return (folder / SOURCE_FILE).is_file() and (folder / "config.json").is_file()


def converted_folder(path: str | Path, progress: ProgressCallback | None = None,
                     cancel: threading.Event | None = None) -> tuple[Path, GgufInfo, bool]:
    """``(folder, info, converted_now)``: the model folder for the GGUF at ``path``, converting it first when
    no complete conversion of these bytes is cached. GgufFileError (one sentence) for a file AttnScope cannot
    open (``gguf_file.check_gguf``); WeightsMismatchError when transformers would leave a tensor of the model
    unfilled; ModelLoadError for anything else transformers refuses; ConversionCancelled."""
    path = Path(path).expanduser().resolve()
    info = check_gguf(path)
    digest = known_digest(path, progress, cancel)
    folder = folder_for(digest)
    if is_complete(folder):
        return folder, info, False
    _convert(path, info, digest, folder, progress, cancel)
    return folder, info, True


def _convert(path: Path, info: GgufInfo, digest: str, folder: Path, progress: ProgressCallback | None,
             cancel: threading.Event | None) -> None:
    from transformers.utils import logging as hf_logging

    if progress:
        progress(f"dequantizing {info.quantization} weights (once; kept in the cache)", 0, LONG_STEP)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # what matters in its load report is checked in _read, not printed
    hf_logging.disable_progress_bar()
    try:
        with _quiet_gguf_reader():
            model, tokenizer = _read(path, info)
            if cancel is not None and cancel.is_set():
                raise ConversionCancelled("Loading cancelled.")
            _save(model, tokenizer, path, info, digest, folder)
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


class _quiet_gguf_reader:
    """transformers' GGUF reader draws its own tqdm bar on stderr whatever ``disable_progress_bar`` says: while
    converting, its module's ``tqdm`` is a silent one (the caller's progress callback says what happens)."""

    def __enter__(self):
        from functools import partial

        try:
            from transformers import modeling_gguf_pytorch_utils as reader
        except ImportError:
            self.reader = None
            return self
        self.reader, self.tqdm = reader, getattr(reader, "tqdm", None)
        if self.tqdm is not None:
            reader.tqdm = partial(self.tqdm, disable=True)
        return self

    def __exit__(self, *exc):
        if self.reader is not None and self.tqdm is not None:
            self.reader.tqdm = self.tqdm
        return False


def _read(path: Path, info: GgufInfo):
    """The model and tokenizer transformers makes of the file, float32; refused when a tensor would be random."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model, loading_info = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, attn_implementation="eager", dtype=torch.float32,
            local_files_only=True, trust_remote_code=False, output_loading_info=True)
    except Exception as exc:  # ValueError, NotImplementedError, KeyError…: transformers could not read the file
        raise GgufFileError(f"{path.name} could not be read as a model: {one_line(exc, 240)}") from None
    missing = sorted(loading_info.get("missing_keys") or ())
    if missing:  # transformers would fill these with random numbers
        raise WeightsMismatchError(f"{path.name} lacks {len(missing)} tensor(s) the model needs "
                                   f"({', '.join(missing[:2])}…): it is not a complete {info.architecture} "
                                   "model.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True,
                                                  trust_remote_code=False)
    except Exception as exc:
        raise GgufFileError(f"{path.name}'s tokenizer could not be read: {one_line(exc, 240)}") from None
    return model, tokenizer


def _save(model, tokenizer, path: Path, info: GgufInfo, digest: str, folder: Path) -> None:
    """Write the float32 model under a temporary name, then rename it to ``folder`` (complete or absent)."""
    # The folder describes a plain float32 model: not "quantized", not to be read from a GGUF again.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    config.attnscope_weights = weights_description(info)
    config.attnscope_gguf_quantization = info.quantization
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _write_json(tmp / SOURCE_FILE, {
            "file": str(path), "size": info.size, "sha256": digest, "architecture": info.architecture,
            "quantization": info.quantization, "transformers": _transformers_version(),
            "weights": weights_description(info)})
        if folder.exists():  # another process finished the same conversion first
            shutil.rmtree(tmp, ignore_errors=True)
            return
        os.replace(tmp, folder)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelLoadError(f"The converted copy of {path.name} could not be written to {cache_root()}: "
                             f"{exc.strerror or exc} (it needs about {info.size * 8 // 1_000_000:,} MB; set "
                             "ATTNSCOPE_CACHE to a folder with room).") from None


def weights_description(info: GgufInfo) -> str:
    """What the numbers are computed from, said on every surface (summary.json ``weights``, status bar, card)."""
    if info.quantization == "F32":
        return "the GGUF file's float32 weights"
    return (f"the GGUF file's {info.quantization} weights dequantized to float32 (AttnScope's numbers are exact for "
            "these weights, which differ slightly from the original release's)")


def source_record(folder: Path) -> dict | None:
    """What a converted folder was made from (``SOURCE_FILE``), or None for any other folder."""
    try:
        data = json.loads((Path(folder) / SOURCE_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
