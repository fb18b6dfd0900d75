"""The Hugging Face hub: what is cached, and downloading a model's config, weights and tokenizer."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from ..errors import HubUnreachableError, ModelLoadError, one_line
from .catalogue import ModelSource, resolve_source, unknown_name_note

#: Files needed from a hub repository (never the pickle, TF, Flax or ONNX copies).
HUB_FILES = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors",
             "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "vocab.txt",
             "special_tokens_map.json", "added_tokens.json", "generation_config.json"]

ProgressCallback = Callable[[str, int, int], None]  # (message, done_bytes, total_bytes)
#: ``total`` of a step that has no count and takes a while (dequantizing a GGUF): say it; 0 is a quick step.
LONG_STEP = -1


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

    unknown = unknown_name_note(source.name)
    if hub_offline():
        raise HubUnreachableError(
            f"{unknown} As a hub id it cannot be looked up: HF_HUB_OFFLINE is set." if unknown else
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
                f"{unknown} As a hub id it cannot be looked up: the Hugging Face hub is not reachable." if unknown
                else f"Cannot download '{source.name}': the Hugging Face hub is not reachable. Go online once to "
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

