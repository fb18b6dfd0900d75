"""What a GGUF file holds, read from its header alone, and whether AttnScope can open it.

A GGUF file (llama.cpp's format, also LM Studio's and Ollama's) is a header — metadata keys and a table of
tensors (name, shape, storage type, offset) — followed by the tensor data. :func:`read_header` parses the
header without touching the data (large string arrays such as the vocabulary are skipped, only their length
kept), so listing many multi-GB files stays fast; :func:`inspect_gguf` turns it into a :class:`GgufInfo` with
the one sentence that says why a file cannot be opened (``problem``), or None.

A GGUF holds no code: nothing in it is executed. Its chat template, a text, is rendered only by transformers'
sandboxed jinja2 environment.
"""
from __future__ import annotations

import mmap
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # v1 counted in 32 bits; llama.cpp has written v3 since 2023
DEFAULT_ALIGNMENT = 32

#: GGUF ``general.architecture`` → the transformers ``model_type`` AttnScope loads it as. Only architectures that
#: transformers can read from GGUF *and* AttnScope has an adapter for (``analysis/families``): llama and qwen2 (the
#: Llama-style adapter), gpt2 (the GPT-2 adapter). Mistral models are llama files to llama.cpp, and open as Llamas
#: (the same adapter). transformers lists a "mistral" architecture too, and reads a llama file whose name is exactly
#: "mistral" as one, but the ``gguf`` package it maps tensor names with has no mistral: such files cannot load.
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "gpt2": "gpt2"}
SUPPORTED_TEXT = "llama (Llama, Mistral, SmolLM…), qwen2 and gpt2"

#: ggml storage type id → (name, elements per block, bytes per block). From the GGUF specification (ggml.h);
#: the ids are stable: a new type gets a new id.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}
#: ``general.file_type`` (llama.cpp's ``llama_ftype``) → the name llama.cpp gives the file's quantization.
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}
FLOAT_TYPES = ("F32", "F16", "BF16")
#: The quantizations people download most (file type → the storage type of most of its weights), named when a
#: file's cannot be read — those transformers can read.
COMMON_TYPES = {"Q8_0": "Q8_0", "Q6_K": "Q6_K", "Q4_K_M": "Q4_K", "Q4_0": "Q4_0"}

# metadata value types: fixed-size ones as struct formats; 8 is a string, 9 an array
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
#: Arrays longer than this are not kept (the vocabulary, its scores and merges): only their length is.
KEEP_ARRAY = 64


class GgufFileError(ModelLoadError):
    """A GGUF file that cannot be opened: the message names the file and why, in one sentence."""


@dataclass(frozen=True)
class SkippedArray:
    """A long metadata array not read into memory: its element type and length."""

    element_type: int
    length: int


@dataclass(frozen=True)
class TensorEntry:
    """One row of the tensor table. ``shape`` in torch order (ggml lists the fastest dimension first)."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int  # from the start of the data section

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type_id, (f"type {self.type_id}", 0, 0))[0]

    @property
    def n_bytes(self) -> int | None:
        """Bytes of data, or None for a storage type this table does not know."""
        if self.type_id not in GGML_TYPES:
            return None
        _, block, size = GGML_TYPES[self.type_id]
        elements = 1
        for d in self.shape:
            elements *= d
        return -(-elements // block) * size


@dataclass(frozen=True)
class GgufHeader:
    """A GGUF file's header: its metadata (long arrays as :class:`SkippedArray`), tensors and where data starts."""

    path: Path
    version: int
    metadata: dict
    tensors: tuple[TensorEntry, ...]
    data_start: int
    file_size: int

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def data_end(self) -> int:
        """Where the last tensor's data ends (bytes from the file's start); unknown types count as empty."""
        return max((self.data_start + t.offset + (t.n_bytes or 0) for t in self.tensors), default=self.data_start)


class _Cursor:
    """Reads little-endian values from a memory map of the file; running past the end is a truncated file."""

    def __init__(self, data, size: int):
        self.data, self.size, self.pos = data, size, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > self.size:
            raise EOFError
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def unpack(self, fmt: str):
        n = struct.calcsize(fmt)
        if self.pos + n > self.size:
            raise EOFError
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += n
        return value

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind in _SCALAR:
            return self.unpack(_SCALAR[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element, n = self.unpack("<I"), self.unpack("<Q")
            if n > self.size:
                raise EOFError
            if n > KEEP_ARRAY:
                self.skip(element, n)
                return SkippedArray(element, n)
            return [self.value(element) for _ in range(n)]
        raise ValueError(f"metadata value type {kind}")

    def skip(self, element: int, n: int) -> None:
        if element in _SCALAR:
            self.pos += struct.calcsize(_SCALAR[element]) * n
        elif element == _STRING:
            data, pos, size = self.data, self.pos, self.size
            for _ in range(n):
                if pos + 8 > size:
                    raise EOFError
                pos += 8 + struct.unpack_from("<Q", data, pos)[0]
            self.pos = pos
        else:
            for _ in range(n):
                self.value(element)
        if self.pos > self.size:
            raise EOFError


def read_header(path: str | Path) -> GgufHeader:
    """The header of the GGUF file at ``path``; GgufFileError (one sentence) when it is not a GGUF file, is of
    a version this reader does not know, or ends inside its header."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size == 0:
                raise GgufFileError(f"{path.name} is empty: it is not a GGUF file.")
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            cur = _Cursor(data, size)
            try:
                if size < 4 or cur.take(4) != MAGIC:
                    raise GgufFileError(f"{path.name} is not a GGUF file (it does not start with 'GGUF').")
                version = cur.unpack("<I")
                if version not in VERSIONS:
                    raise GgufFileError(f"{path.name} is GGUF version {version}; AttnScope reads versions 2 and 3 "
                                        "(convert it again with a current llama.cpp).")
                n_tensors, n_keys = cur.unpack("<Q"), cur.unpack("<Q")
                metadata = {}
                for _ in range(n_keys):
                    key = cur.string()
                    metadata[key] = cur.value(cur.unpack("<I"))
                tensors = []
                for _ in range(n_tensors):
                    name = cur.string()
                    dims = [cur.unpack("<Q") for _ in range(cur.unpack("<I"))]
                    type_id, offset = cur.unpack("<I"), cur.unpack("<Q")
                    tensors.append(TensorEntry(name, tuple(reversed(dims)), type_id, offset))
                alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
                alignment = alignment if isinstance(alignment, int) and alignment > 0 else DEFAULT_ALIGNMENT
                data_start = -(-cur.pos // alignment) * alignment
            except (EOFError, struct.error):
                raise GgufFileError(f"{path.name} is truncated or corrupt: it ends inside its header (an "
                                    "interrupted download?).") from None
            except (ValueError, OverflowError, MemoryError):
                raise GgufFileError(f"{path.name} is corrupt: its header cannot be read.") from None
            finally:
                data.close()
    except OSError as exc:
        raise GgufFileError(f"{path.name} cannot be read: {exc.strerror or exc}.") from None
    return GgufHeader(path, version, metadata, tuple(tensors), data_start, size)


def file_type(header: GgufHeader) -> str:
    """The file's quantization as llama.cpp names it (``Q4_1``, ``Q4_K_M``, ``F16``): ``general.file_type``
    when the file states it, else the storage type holding the most bytes of 2-D tensors."""
    stated = header.get("general.file_type")
    if isinstance(stated, int) and stated in FILE_TYPES:
        return FILE_TYPES[stated]
    weights = Counter()
    for t in header.tensors:
        if len(t.shape) >= 2:
            weights[t.type_name] += t.n_bytes or 0
    return weights.most_common(1)[0][0] if weights else "unknown"


def dequantizable_types() -> frozenset[str]:
    """The storage types transformers can turn into floats when it reads a GGUF (its own table, so a newer
    transformers that learns a type is followed): the float types and every quantized type of its dequantizer."""
    try:
        from transformers.integrations.gguf.dequant import GGML_NAME
    except ImportError:  # another transformers layout: the types it has read since 4.41
        return frozenset((*FLOAT_TYPES, "Q4_0", "Q4_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"))
    return frozenset((*FLOAT_TYPES, *GGML_NAME.values()))


@dataclass(frozen=True)
class GgufInfo:
    """What the model list shows of a GGUF file, and whether AttnScope can open it.

    ``name``: ``general.name`` when the file has one, else the file's name; ``size`` in bytes; ``architecture``
    as the file states it; ``model_type`` the transformers type it is read as (None when unsupported);
    ``quantization`` as :func:`file_type`; ``problem``: why it cannot be opened (one sentence), or None."""

    path: Path
    name: str
    size: int
    architecture: str
    model_type: str | None
    quantization: str
    n_layer: int | None = None
    n_head: int | None = None
    context_length: int | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _problem(header: GgufHeader, path: Path) -> str | None:
    """The first reason AttnScope cannot open this file, as a sentence naming what would work; None if none."""
    name, arch = path.name, header.architecture
    kind = str(header.get("general.type", "model"))
    if kind == "adapter" or "adapter.type" in header.metadata:
        return (f"{name} is a LoRA adapter, not a model: open the model it adapts (a GGUF of the base model), "
                "or a model with the adapter merged in.")
    if arch == "clip" or kind in ("mmproj", "clip") or any(k.startswith("clip.") for k in header.metadata):
        return (f"{name} is a vision projector (mmproj) for a multimodal model, not a language model: open the "
                "language model's GGUF beside it.")
    split = header.get("split.count")
    if isinstance(split, int) and split > 1:
        return (f"{name} is part {int(header.get('split.no', 0)) + 1} of a GGUF split into {split} files, which "
                "transformers cannot read: merge them first (llama-gguf-split --merge FIRST-PART OUT.gguf).")
    if arch not in ARCHITECTURES:
        return (f"{name} is a '{arch or 'unknown'}' model; AttnScope opens GGUF files of {SUPPORTED_TEXT} "
                "models.")
    if arch == "mistral" or (arch == "llama" and header.get("general.name") == "mistral"):
        return (f"{name} is a GGUF that transformers reads as a 'mistral' architecture, which it cannot map to "
                "weights (the gguf package has none); a llama-architecture file of the model, as llama.cpp writes "
                "Mistral models, opens.")
    if header.data_end > header.file_size:
        return (f"{name} is truncated: its tensors need {header.data_end:,} bytes but the file has "
                f"{header.file_size:,} (an interrupted download?).")
    if not header.tensors:
        return f"{name} holds no tensors: it is not a model."
    can = dequantizable_types()
    cannot = sorted({t.type_name for t in header.tensors} - can)
    if cannot:
        common = [file_type for file_type, stored in COMMON_TYPES.items() if stored in can]
        return (f"{name} stores tensors as {', '.join(cannot)}, which transformers cannot dequantize; a "
                f"{', '.join(common)} or F16 file of the same model opens.")
    if "tokenizer.ggml.model" not in header.metadata or "tokenizer.ggml.tokens" not in header.metadata:
        return (f"{name} has no tokenizer (no tokenizer.ggml.tokens in its metadata); AttnScope needs the "
                "model's tokenizer: use a GGUF converted with it.")
    return None


def _int(header: GgufHeader, key: str) -> int | None:
    value = header.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_type_of(header: GgufHeader) -> str | None:
    """The transformers ``model_type`` this file is read as; None for an architecture without an adapter."""
    return ARCHITECTURES.get(header.architecture)


def inspect_gguf(path: str | Path) -> GgufInfo:
    """Read ``path``'s header and say what it is; GgufFileError when even the header cannot be read (not a GGUF
    file, truncated inside the header, unreadable). Fast: tensor data is never read."""
    path = Path(path)
    header = read_header(path)
    arch = header.architecture
    name = header.get("general.name")
    return GgufInfo(
        path=path, name=name if isinstance(name, str) and name.strip() else path.stem, size=header.file_size,
        architecture=arch, model_type=model_type_of(header), quantization=file_type(header),
        n_layer=_int(header, f"{arch}.block_count"), n_head=_int(header, f"{arch}.attention.head_count"),
        context_length=_int(header, f"{arch}.context_length"), problem=_problem(header, path),
    )


def check_gguf(path: str | Path) -> GgufInfo:
    """:func:`inspect_gguf`, raising GgufFileError with its ``problem`` when the file cannot be opened."""
    info = inspect_gguf(path)
    if info.problem:
        raise GgufFileError(info.problem)
    return info

