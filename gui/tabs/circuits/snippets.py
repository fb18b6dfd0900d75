""""Copy as code": a short Python snippet, using AttnScope's analysis API, that reproduces a page's numbers.

Every snippet loads the model as the app did, tokenises the text as the app ran it
(``analysis.measures.ablation.text_tokens``: BOS, chat format, token cap) and leaves the page's numbers in a variable
named ``result`` — the same object the page shows (tests/gui/test_circuits_tab.py runs each snippet and compares).
No Qt here: the snippets are plain strings.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Origin:
    """Where a page's numbers came from: the model as ``load_model`` takes it, its device, and the text's tokenisation."""

    model: str  # "bundled", "smollm2", a hub id, a folder or a .gguf path
    device: str
    text: str
    bos: bool
    chat: bool
    max_tokens: int | None  # None: the default cap (the model's context or 2,048)


def model_argument(loaded) -> str:
    """What ``load_model`` takes to load ``loaded`` again: its name (bundled, a package, a hub id) or its path."""
    source = loaded.source
    if source.kind in ("bundled", "package", "hub") or source.path is None:
        return source.name
    return str(source.path)


def origin_of(loaded, text: str, bos: bool, chat: bool, max_tokens: int | None) -> Origin:
    return Origin(model_argument(loaded), str(loaded.device), text, bool(bos), bool(chat),
                  None if max_tokens is None else int(max_tokens))


def _head(origin: Origin, imports: list[str]) -> list[str]:
    return [*imports,
            "from analysis.measures.ablation import text_tokens",
            "from analysis.model.loading import load_model",
            "",
            f"loaded = load_model({origin.model!r}, device={origin.device!r})"]


def _ids(origin: Origin, text: str | None = None, name: str = "ids") -> str:
    return (f"{name} = list(text_tokens(loaded, {(origin.text if text is None else text)!r}, bos={origin.bos}, "
            f"max_tokens={origin.max_tokens}, chat={origin.chat}).ids)")


def attribution_code(origin: Origin, answer: str, wrong: str | None, position: int) -> str:
    """``answer``/``wrong``: how the snippet names each token (an id, or a ``single_token`` call)."""
    return "\n".join([
        *_head(origin, ["from analysis.measures.attribution import attribute, single_token"]),
        _ids(origin),
        f"result = attribute(loaded, ids, {answer}, {wrong}, position={position})",
        "# value = Σ heads + Σ mlps + embeddings + biases + residual_error (logits)",
        "print(result.metric, '=', result.value)",
        "print('heads', result.heads.sum(), 'mlps', result.mlps.sum(), 'embeddings', result.embeddings,",
        "      'biases', result.biases, 'residual_error', result.residual_error)",
        "print(result.heads.round(3))  # (layer, head): each head's direct contribution",
        ""])


def lens_code(origin: Origin) -> str:
    return "\n".join([
        *_head(origin, ["from analysis.measures.logit_lens import logit_lens"]),
        _ids(origin),
        "result = logit_lens(loaded, ids)",
        "# (layer, position): the lens's top token and its probability, the final prediction's rank (0 = top)",
        "for layer in range(len(result.top)):",
        "    print(layer, [loaded.tokenizer.decode([t]) for t in result.top[layer]], result.prob[layer].round(3),",
        "          result.final_rank[layer])",
        "print('surprisal (nats)', result.surprisal.round(3))",
        ""])


def patching_code(origin: Origin, clean: str, corrupted: str, metric: str, answer: str | None, wrong: str | None,
                  what: str, denoising: bool, layers: int | None = None) -> str:
    """``answer``/``wrong``: the tokens as typed (" Mary"), or None. ``layers``: the map shown had only its first
    ``layers`` layers (a cancelled run): the snippet computes those, and says so."""
    partial = ("" if layers is None else
               f", layers={layers})  # the app's run was cancelled after {layers} layers: those are what it showed")
    return "\n".join([
        *_head(origin, ["from analysis.measures.patching import make_metric, patch"]),
        _ids(origin, clean, "clean"),
        _ids(origin, corrupted, "corrupted"),
        f"metric = make_metric(loaded, {metric!r}, {answer!r}, {wrong!r})",
        f"result = patch(loaded, clean, corrupted, metric, {what!r}, denoising={denoising}"
        + (partial or ")") + ("" if layers is None else "\n# drop layers=… for the whole map (NaN: not patched)"),
        "# effect = (patched − corrupted) / (clean − corrupted)",
        "print(result.metric_label, 'clean', result.clean, 'corrupted', result.corrupted)",
        "print(result.effect.round(3))",
        ""])


def compare_code(origin: Origin, clean: str, corrupted: str, bos: bool, what: str, shown) -> str:
    """``what`` "head" (``shown`` = (layer, head)) or "scores" (``shown`` = a score's name): the difference
    clean − corrupted the Compare page shows."""
    last = (f"result = runs.head_difference({shown[0]}, {shown[1]})  # (query, key): A_clean − A_corrupted"
            if what == "head" else
            f"result = runs.score_difference({shown!r})  # (layer, head): S_clean − S_corrupted")
    return "\n".join([
        "from analysis.measures.compare import run_pair",
        "from analysis.model.loading import load_model",
        "",
        f"loaded = load_model({origin.model!r}, device={origin.device!r})",
        f"runs = run_pair(loaded, {clean!r}, {corrupted!r}, bos={bos})  # each prompt run on its own",
        last,
        "print(result.round(3))",
        ""])


def composition_code(origin: Origin, kind: str, top: int) -> str:
    return "\n".join([
        "from analysis.display import head_name",
        "from analysis.measures.composition import model_composition",
        "from analysis.model.loading import load_model",
        "",
        f"loaded = load_model({origin.model!r}, device={origin.device!r})",
        "result = model_composition(loaded)  # weights only: no text",
        f"for e_layer, e_head, l_layer, l_head, score in result.strongest({kind!r}, {top}):",
        "    print(head_name(e_layer, e_head), '→', head_name(l_layer, l_head), round(score, 4))",
        ""])
