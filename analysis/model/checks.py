"""Is this folder a model AttnScope can run? Each check refuses with one sentence (ModelLoadError and its kin).

The files are regular files; config.json describes a model of a supported family; the weights are
safetensors (pickle only when allowed); the weights are exactly the ones the config asks for, no more and no
fewer (checked before anything is allocated, and again from transformers' loading report); the tokenizer
has the family's special tokens and no id past the embedding; a test forward is finite.
"""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..errors import ModelCheckError, ModelLoadError, PickleWeightsError, WeightsMismatchError
from ..families import family_for
from ..families.family import Family
from .safetensors_headers import safetensors_elements, safetensors_shapes

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


def shape_text(shape: tuple) -> str:
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


def check_forward(model, tokenizer, folder: Path, device: str, family: Family) -> None:
    """A test forward on a few tokens (no more than the context holds): every float the model returns (logits, or
    the hidden states of a model without a head, and every layer's attention weights) must be finite (NaN or
    infinite weights make every picture meaningless). The family says what the forward takes (decoders: no KV
    cache; encoders take no ``use_cache``)."""
    import torch

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


def is_unsafe_pickle(exc: BaseException) -> bool:
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

