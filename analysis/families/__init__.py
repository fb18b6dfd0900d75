"""One adapter per model family; the rest of AttnScope asks the adapter and never tests a model-type string.

    family = family_for(config)            # config.json as a dict, or a transformers config
    weights = family.attention_weights(model, layer)   # AttentionWeights (weights.py): the common shape
    recompute(weights, layer_input)                    # steps.py: the engine's step-by-step recompute

Loading (analysis.model.loading.load_model) and the one capture (analysis.run.capture) ask the adapter
(family.py: where the blocks are, what enters attention, W_O); parity is analysis.measures.parity.

Adding a family: a module with a ``Family`` subclass, and its instance in ``FAMILIES`` below. A family whose
maths is new also adds its step to steps.py (the function, its FamilyRecomputation field, a line of
``recompute``) and to step_views.STEPS (its label and heatmaps), which the From-scratch tab iterates.
"""
from __future__ import annotations

from typing import Any

from ..errors import ModelLoadError
from .bert import DISTILBERT, FAMILY as BERT
from .family import Family, config_get
from .gpt2 import FAMILY as GPT2
from .llama import FAMILY as LLAMA
from .neox import FAMILY as NEOX

FAMILIES: tuple[Family, ...] = (GPT2, LLAMA, NEOX, BERT, DISTILBERT)
_BY_MODEL_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in f.model_types}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_BY_MODEL_TYPE)
#: Every model a folder may hold, for people (the Open folder dialog): "GPT-2, Llama, Qwen2, Mistral, …".
FOLDER_MODELS: str = ", ".join(f.models for f in FAMILIES)


def family_for(config: Any, check: bool = True) -> Family:
    """The adapter for ``config.model_type``; ModelLoadError (one sentence) for anything else.

    With ``check`` the family also refuses what its recompute cannot follow (e.g. an unsupported rotary scaling)."""
    model_type = config_get(config, "model_type")
    family = _BY_MODEL_TYPE.get(model_type)
    if family is None:
        raise ModelLoadError(
            f"Architecture '{model_type or 'unknown'}' is not supported yet: AttnScope reads "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} models.")
    if check:
        family.check(config)
    return family


def family_named(name: str) -> Family:
    """The adapter whose ``name`` is ``name`` (``AttentionWeights.family``); KeyError for none."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise KeyError(name)

