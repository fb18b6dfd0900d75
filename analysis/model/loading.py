"""Finding and loading a model of any supported family with its attention weights exposed.

The source is resolved (``catalogue``), fetched when it is a hub id (``hub``), checked (``checks``), and
loaded into a :class:`~analysis.model.loaded.LoadedModel`.

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

import threading
import time
from pathlib import Path

from ..errors import ModelLoadError, WeightsMismatchError, one_line
from ..families import family_for
from .catalogue import ModelSource, resolve_source
from .checks import (check_config, check_forward, check_regular_files, check_special_tokens, check_tokenizer,
                     check_weight_count, check_weights, is_unsafe_pickle, read_config, shape_mismatches, shape_text,
                     weights_format)
from .device_map import check_device_map, execution_device
from .devices import resolve_device, resolve_dtype
from .gguf_convert import converted_folder
from .hub import DownloadCancelled, ProgressCallback, cached_hub_folder, download_hub_model
from .loaded import LoadedModel
from .safetensors_headers import safetensors_names

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt")


def load_model(
    source: str | ModelSource,
    device: str = "auto",
    dtype: str = "float32",
    allow_pickle: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    device_map: str | None = None,
    max_memory: dict | None = None,
) -> LoadedModel:
    """Load a model of any supported family and its tokenizer, ready to return attention weights.

    Raises ModelLoadError with a message for the user — missing, corrupt or unsupported; its
    subclasses PickleWeightsError (pickle-only folder, ``allow_pickle`` not given),
    HubUnreachableError (not cached, hub not reachable), WeightsMismatchError (the file's tensors
    are not the config's) and ModelCheckError (bad config, tokenizer ids past the embedding, a test
    forward that is not finite) — or DeviceError. Nothing is half-loaded: the caller's previous
    model is untouched unless this returns.

    ``device_map`` (``"auto"``, …; ``analysis.model.device_map``) splits the model across the GPUs, the CPU and
    the disk as accelerate places it, each capped by ``max_memory`` (``{0: bytes, "cpu": bytes}``); ``device``
    is then where its input goes (the first block's device).
    """
    started = time.perf_counter()
    src = resolve_source(source) if isinstance(source, str) else source
    device_name = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device_name.split(":")[0])
    device_map = check_device_map(device_map)
    split = {}
    if device_map is not None:
        import atexit
        import shutil
        import tempfile

        # accelerate writes what fits nowhere else here (safetensors weights are read in place when they can be)
        offload = tempfile.mkdtemp(prefix="attnscope-offload-")
        atexit.register(shutil.rmtree, offload, ignore_errors=True)
        split = {"device_map": device_map, "max_memory": max_memory, "offload_folder": offload}

    if src.kind == "hub":
        folder = cached_hub_folder(src)
        if folder is None:
            folder = download_hub_model(src, progress=progress, cancel=cancel)
    elif src.is_gguf:  # dequantized once into the cache, then a folder like any other (gguf_convert)
        folder, _, _ = converted_folder(src.path, progress=progress, cancel=cancel)
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
    import logging

    accelerate_log = logging.getLogger("accelerate")  # "Some parameters are on the meta device…": that is the point
    accelerate_level = accelerate_log.level
    accelerate_log.setLevel(logging.ERROR)
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
                **split,
            )
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        except Exception as exc:  # OSError, ValueError, safetensors' own SafetensorError, …: all mean "cannot read it"
            if fmt == "pickle" and is_unsafe_pickle(exc):
                raise ModelLoadError(f"{folder}'s pickle weights hold more than tensors (objects that could run "
                                     "code), so they were not loaded even though pickle was allowed.") from None
            wrong = shape_mismatches(model_class, model_config, folder) if fmt == "safetensors" else []
            if wrong:
                shown = "; ".join(f"{name} is {shape_text(have)} in the file, {shape_text(want)} in the config"
                                  for name, have, want in wrong[:2])
                more = f" (and {len(wrong) - 2} more)" if len(wrong) > 2 else ""
                raise WeightsMismatchError(f"{folder}: the weights do not match the config: {shown}{more}. Use "
                                           "the config the weights were saved with.") from None
            raise ModelLoadError(f"{folder} could not be loaded (corrupt or incomplete?): {one_line(exc, 300)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
        accelerate_log.setLevel(accelerate_level)
    check_weights(model, loading_info, folder)
    check_special_tokens(tokenizer, family, folder)
    check_tokenizer(tokenizer, model, folder)
    if split:
        device_name = execution_device(model)  # accelerate placed every block; the input goes to the first
    else:
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
