"""Finding and loading a GPT-2-family model with its attention weights exposed.

A *source* is one of: ``"bundled"`` (the model shipped in ``resources/model``), a hub id
(``gpt2``, ``distilgpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl`` or any ``org/name``),
or a local folder written by ``save_pretrained``.

Rules that keep users safe and informed:
- weights are read from safetensors; a folder with only pickle weights (``*.bin``) is refused
  unless the caller opts in with ``allow_pickle=True``; ``trust_remote_code`` is never set;
- attention runs with ``attn_implementation="eager"``: the default (sdpa) kernel returns no
  attention weights in transformers 5;
- a hub id that is neither cached nor reachable fails within seconds with a message.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .devices import resolve_device, resolve_dtype
from .errors import ModelLoadError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_MODEL_DIR = PROJECT_ROOT / "resources" / "model"
BUNDLED = "bundled"

#: Hub ids offered in the app, with the repository each now lives in.
HUB_MODELS: dict[str, str] = {
    "gpt2": "openai-community/gpt2",
    "distilgpt2": "distilbert/distilgpt2",
    "gpt2-medium": "openai-community/gpt2-medium",
    "gpt2-large": "openai-community/gpt2-large",
    "gpt2-xl": "openai-community/gpt2-xl",
}
#: Files needed from a hub repository (never the pickle, TF, Flax or ONNX copies).
HUB_FILES = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors",
             "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
             "generation_config.json"]
SUPPORTED_MODEL_TYPES = ("gpt2",)
TOKENIZER_FILES = ("tokenizer.json", "vocab.json")

ProgressCallback = Callable[[str, int, int], None]  # (message, done_bytes, total_bytes)


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from. ``kind`` is ``bundled``, ``folder`` or ``hub``."""

    kind: str
    name: str  # what the user typed or picked
    path: Path | None = None  # folder, for bundled and folder sources
    repo_ids: tuple[str, ...] = ()  # hub: the canonical repo first, then aliases to look for in the cache

    @property
    def label(self) -> str:
        if self.kind == "bundled":
            return "bundled"
        return self.name if self.kind == "hub" else str(self.path)


def resolve_source(source: str) -> ModelSource:
    """Classify what the user typed: ``bundled``, an existing folder, a path that is not there, or a hub id."""
    text = (source or "").strip()
    if not text:
        raise ModelLoadError("No model given; use 'bundled', a hub id such as 'gpt2', or a model folder.")
    if text == BUNDLED:
        return ModelSource("bundled", BUNDLED, BUNDLED_MODEL_DIR)
    path = Path(text).expanduser()
    if path.is_dir():
        return ModelSource("folder", text, path.resolve())
    if path.exists():
        raise ModelLoadError(f"'{text}' is a file; a model is a folder (with config.json and model.safetensors).")
    looks_like_path = text.startswith((".", "/", "~")) or os.sep in text.strip("/") and text.count("/") != 1
    if text in HUB_MODELS:
        canonical = HUB_MODELS[text]
        return ModelSource("hub", text, repo_ids=(canonical, text))
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
        raise ModelLoadError(
            f"'{source.name}' is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
            "go online once to download it, or open a local model folder (or use --model bundled)."
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
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if "ConnectError" in reason or "connect" in reason.lower() or "resolve" in reason.lower() or "internet" in str(exc):
            raise ModelLoadError(
                f"Cannot download '{source.name}': the Hugging Face hub is not reachable. Go online once to "
                "download it, or open a local model folder (or use --model bundled)."
            ) from None
        raise ModelLoadError(f"Cannot download '{source.name}': {reason}") from None
    return Path(folder)


# ----------------------------------------------------------------------------- folder checks
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
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(
            f"Architecture '{model_type or 'unknown'}' is not supported yet: AttnScope reads GPT-2-family models "
            "(gpt2, distilgpt2, gpt2-medium/large/xl and folders saved from them)."
        )
    return config


def weights_format(folder: Path, allow_pickle: bool) -> str:
    """``"safetensors"`` or ``"pickle"`` (only when allowed); otherwise a ModelLoadError saying why."""
    if (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file():
        return "safetensors"
    pickles = sorted(p.name for p in folder.glob("*.bin"))
    if pickles:
        if allow_pickle:
            return "pickle"
        raise ModelLoadError(
            f"{folder} has only PyTorch pickle weights ({', '.join(pickles)}). Pickle files can run code when "
            "loaded; if you trust this folder, opt in with --allow-pickle (or 'Allow pickle weights' in the app), "
            "or convert it to safetensors."
        )
    raise ModelLoadError(f"{folder} has no weights: model.safetensors is missing.")


# ----------------------------------------------------------------------------- loaded model
@dataclass(frozen=True)
class AttentionParameters:
    """One layer's attention parameters as float32 numpy (GPT-2 Conv1D stores weights as (in, out))."""

    ln_weight: np.ndarray  # (d_model,)
    ln_bias: np.ndarray  # (d_model,)
    ln_eps: float
    qkv_weight: np.ndarray  # (d_model, 3*d_model): c_attn, x @ W + b
    qkv_bias: np.ndarray  # (3*d_model,)
    out_weight: np.ndarray  # (d_model, d_model): c_proj
    out_bias: np.ndarray  # (d_model,)
    n_head: int
    scale: float  # multiplies QKᵀ: 1/√d_k (and 1/(layer+1) when the config asks for it)

    @property
    def d_model(self) -> int:
        return int(self.ln_weight.shape[0])

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head


@dataclass
class LoadedModel:
    """A model ready to run. Owned by one thread (the worker); only ``info`` is shared with the UI."""

    model: Any
    tokenizer: Any
    source: ModelSource
    folder: Path
    device: str
    dtype: str
    prepend_bos_default: bool
    load_seconds: float
    _parameters: dict[int, AttentionParameters] = field(default_factory=dict, repr=False)
    _probe: Any = field(default=None, repr=False)

    @property
    def config(self):
        return self.model.config

    @property
    def n_layer(self) -> int:
        return int(self.config.n_layer)

    @property
    def n_head(self) -> int:
        return int(self.config.n_head)

    @property
    def d_model(self) -> int:
        return int(self.config.n_embd)

    @property
    def context_length(self) -> int:
        return int(self.config.n_positions)

    @property
    def bos_token(self) -> str:
        return "<|endoftext|>"

    @property
    def info(self) -> "ModelInfo":
        return ModelInfo(
            label=self.source.label, kind=self.source.kind, folder=str(self.folder), device=self.device,
            dtype=self.dtype, n_layer=self.n_layer, n_head=self.n_head, d_model=self.d_model,
            context_length=self.context_length, vocab_size=int(self.config.vocab_size),
            parameters=int(sum(p.numel() for p in self.model.parameters())),
            prepend_bos_default=self.prepend_bos_default, load_seconds=self.load_seconds,
        )

    def attention_parameters(self, layer: int) -> AttentionParameters:
        """Layer ``layer``'s ln_1, c_attn and c_proj as float32 numpy (copied once, then cached)."""
        if not 0 <= layer < self.n_layer:
            raise IndexError(f"layer {layer} out of range 0..{self.n_layer - 1}")
        if layer not in self._parameters:
            block = self.model.transformer.h[layer]

            def as_numpy(t):
                array = t.detach().to("cpu", dtype=__import__("torch").float32).numpy().copy()
                array.setflags(write=False)
                return array

            d_head = self.d_model // self.n_head
            scale = d_head**-0.5 if getattr(self.config, "scale_attn_weights", True) else 1.0
            if getattr(self.config, "scale_attn_by_inverse_layer_idx", False):
                scale /= float(layer + 1)
            self._parameters[layer] = AttentionParameters(
                ln_weight=as_numpy(block.ln_1.weight), ln_bias=as_numpy(block.ln_1.bias), ln_eps=float(block.ln_1.eps),
                qkv_weight=as_numpy(block.attn.c_attn.weight), qkv_bias=as_numpy(block.attn.c_attn.bias),
                out_weight=as_numpy(block.attn.c_proj.weight), out_bias=as_numpy(block.attn.c_proj.bias),
                n_head=self.n_head, scale=scale,
            )
        return self._parameters[layer]


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


def load_model(
    source: str | ModelSource,
    device: str = "auto",
    dtype: str = "float32",
    allow_pickle: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> LoadedModel:
    """Load a GPT-2-family model and its tokenizer, ready to return attention weights.

    Raises ModelLoadError (missing, corrupt, unsupported, offline) or DeviceError with a
    message for the user.
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
    config = read_config(folder)
    fmt = weights_format(folder, allow_pickle)
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise ModelLoadError(f"{folder} has no tokenizer (tokenizer.json or vocab.json + merges.txt).")
    if cancel is not None and cancel.is_set():
        raise DownloadCancelled("Loading cancelled.")
    if progress:
        progress("reading weights", 0, 0)

    from transformers import AutoTokenizer, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # 'unused weights' chatter is not for the user
    hf_logging.disable_progress_bar()
    try:
        model = GPT2LMHeadModel.from_pretrained(
            folder, attn_implementation="eager", use_safetensors=(fmt == "safetensors"), dtype=torch_dtype,
            local_files_only=True, trust_remote_code=False,
        )
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # OSError, ValueError, safetensors' own SafetensorError, …: all mean "cannot read it"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ModelLoadError(f"{folder} could not be loaded (corrupt or incomplete?): {first}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    if len(tokenizer) == 0 or tokenizer.convert_tokens_to_ids("<|endoftext|>") is None:
        raise ModelLoadError(f"{folder} has an empty or unusable tokenizer.")
    if len(tokenizer) > model.config.vocab_size:
        raise ModelLoadError(
            f"{folder}: the tokenizer has {len(tokenizer)} tokens but the model only {model.config.vocab_size}."
        )
    try:
        model.to(device_name)
    except Exception as exc:
        from .errors import DeviceError

        raise DeviceError(f"Cannot move the model to {device_name}: {str(exc).splitlines()[0][:200]}") from None
    model.eval()
    model.requires_grad_(False)
    return LoadedModel(
        model=model, tokenizer=tokenizer, source=src, folder=Path(folder), device=device_name, dtype=dtype,
        prepend_bos_default=bool(config.get("attnscope_prepend_bos", False)),
        load_seconds=time.perf_counter() - started,
    )
