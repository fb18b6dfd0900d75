"""Finding and loading a GPT-2-family model with its attention weights exposed.

A *source* is one of: ``"bundled"`` (the model shipped in ``resources/model``), a hub id
(``gpt2``, ``distilgpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl`` or any ``org/name``),
or a local folder written by ``save_pretrained``.

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
from .errors import (HubUnreachableError, ModelCheckError, ModelLoadError, PickleWeightsError,
                     WeightsMismatchError, one_line)

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
               "added_tokens.json", "pytorch_model.bin")


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


def check_config(config, folder: Path) -> None:
    """Refuse a config that cannot describe a model: layers, heads, width and context must be positive
    integers and the width divisible by the heads. Reads the generic names every transformers config maps
    (``num_hidden_layers`` is GPT-2's ``n_layer``, ``hidden_size`` its ``n_embd``, …)."""
    def value(name: str):
        v = getattr(config, name, None)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    fields = {"layers": "num_hidden_layers", "heads": "num_attention_heads", "width": "hidden_size",
              "context": "max_position_embeddings", "vocabulary": "vocab_size"}
    bad = [f"{label} = {getattr(config, name, None)!r}" for label, name in fields.items()
           if value(name) is None or value(name) <= 0]
    if bad:
        raise ModelCheckError(f"{folder / 'config.json'} does not describe a model ({', '.join(bad)}): "
                              "layers, heads, width, context and vocabulary must be positive integers.")
    if value("hidden_size") % value("num_attention_heads"):
        raise ModelCheckError(f"{folder / 'config.json'} does not describe a model: the width "
                              f"{value('hidden_size')} is not divisible by the {value('num_attention_heads')} heads.")


#: Tensors older checkpoints saved that are constants, not weights (the models compute them now):
#: GPT-2's causal-mask buffers ``attn.bias`` / ``attn.masked_bias``, rotary models' ``inv_freq``.
#: Ignored when unexpected in any model family, on top of what the model class itself ignores.
LEGACY_BUFFERS = (r"(^|\.)attn\.bias$", r"(^|\.)attn\.masked_bias$", r"(^|\.)rotary_emb\.inv_freq$")


def weights_mismatch(model, loading_info: dict) -> tuple[list[str], list[str]]:
    """(missing, unexpected) tensor names that matter, from transformers' loading report.

    Ignored: what the model class itself declares ignorable (``_keys_to_ignore_on_load_missing`` /
    ``_keys_to_ignore_on_load_unexpected``), tied weights whose source was loaded (GPT-2's
    ``lm_head.weight`` is ``wte``), and :data:`LEGACY_BUFFERS`. Everything else missing would run
    with random numbers; everything else unexpected means the file is for another model.
    """
    def patterns(name: str) -> list[str]:
        return list(getattr(type(model), name, None) or [])

    missing = set(loading_info.get("missing_keys") or ())
    unexpected = set(loading_info.get("unexpected_keys") or ())
    tied = dict(getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or {})
    if not isinstance(tied, dict):  # older transformers: a list of tied names
        tied = {}
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
    raise WeightsMismatchError(f"{folder}: the weights do not match the config: {'; '.join(parts)}. AttnScope "
                               "refuses to fill the gaps with random weights; use the folder the weights were "
                               "saved with.")


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


def check_forward(model, tokenizer, folder: Path, device: str) -> None:
    """A test forward on a few tokens: logits and every layer's attention weights must be finite
    (NaN or infinite weights make every picture meaningless)."""
    import torch

    specials = [i for i in tokenizer.all_special_ids if i is not None]
    ids = (specials[:1] + [i for i in range(min(3, int(model.config.vocab_size)))])[:4]
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=device), output_attentions=True, use_cache=False)
    attentions = out.attentions or ()
    if len(attentions) != model.config.num_hidden_layers:
        raise ModelCheckError(f"{folder}: the model returned attention weights for {len(attentions)} of "
                              f"{model.config.num_hidden_layers} layers.")
    finite = bool(torch.isfinite(out.logits).all()) and all(bool(torch.isfinite(a).all()) for a in attentions)
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
        raise PickleWeightsError(
            f"{folder} has only PyTorch pickle weights ({', '.join(pickles)}), and pickle files can run code "
            "when loaded: load it only if you trust where it came from, or convert it to safetensors.",
            source=str(folder),
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
    fmt = weights_format(folder, allow_pickle)
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise ModelLoadError(f"{folder} has no tokenizer (tokenizer.json or vocab.json + merges.txt).")
    if cancel is not None and cancel.is_set():
        raise DownloadCancelled("Loading cancelled.")
    if progress:
        progress("reading weights", 0, 0)

    from transformers import AutoConfig, AutoTokenizer, GPT2LMHeadModel
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
        try:
            model, loading_info = GPT2LMHeadModel.from_pretrained(
                folder, config=model_config, attn_implementation="eager", use_safetensors=(fmt == "safetensors"),
                dtype=torch_dtype, local_files_only=True, trust_remote_code=False, output_loading_info=True,
            )
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        except Exception as exc:  # OSError, ValueError, safetensors' own SafetensorError, …: all mean "cannot read it"
            if fmt == "pickle" and _is_unsafe_pickle(exc):
                raise ModelLoadError(f"{folder}'s pickle weights hold more than tensors (objects that could run "
                                     "code), so they were not loaded even though pickle was allowed.") from None
            raise ModelLoadError(f"{folder} could not be loaded (corrupt or incomplete?): {one_line(exc, 300)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    check_weights(model, loading_info, folder)
    if len(tokenizer) == 0 or tokenizer.convert_tokens_to_ids("<|endoftext|>") is None:
        raise ModelCheckError(f"{folder} has an empty or unusable tokenizer.")
    check_tokenizer(tokenizer, model, folder)
    try:
        model.to(device_name)
    except Exception as exc:
        from .errors import DeviceError

        raise DeviceError(f"Cannot move the model to {device_name}: {one_line(exc, 200)}") from None
    model.eval()
    model.requires_grad_(False)
    check_forward(model, tokenizer, folder, device_name)
    return LoadedModel(
        model=model, tokenizer=tokenizer, source=src, folder=Path(folder), device=device_name, dtype=dtype,
        prepend_bos_default=bool(config.get("attnscope_prepend_bos", False)),
        load_seconds=time.perf_counter() - started,
    )
