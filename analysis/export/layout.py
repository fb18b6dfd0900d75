"""Which arrays an export writes, and where, at any length: decided before anything is computed or written.

Letters: L layers, H heads, n tokens, k heads asked for (``--heads``), m their distinct layers.

Every map of a text takes L·H·n²·4 bytes, and so do its value norms; rollout takes L·n²·4. An export writes into
attention.npz each of these arrays that takes at most the export budget (``--max-export-mb``, default
:data:`DEFAULT_MAX_EXPORT_MB`); an array above it is left out, and summary.json's ``export`` entry and one warning
say so and how to get it (:meth:`ExportLayout.warning`):

    arrays                  short text (fits)    above the budget     --heads L.H,…             --all-maps
    attentions (L,H,n,n)    attention.npz        left out             (as without)              attentions.npy
    value_norms (L,H,n,n)   attention.npz        left out             (as without)              value_norms.npy
    rollout (L,n,n)         attention.npz        left out             (as without)              rollout.npy
    head_maps (k,n,n)       —                    —                    attention.npz             (with --heads)
    head_value_norms        —                    —                    attention.npz             (with --heads)
    layer_rollout (m,n,n)   —                    —                    attention.npz, when the whole rollout is not
                                                                      in the export

``--heads`` adds the heads' whole maps (``head_maps``, rows ``head_index`` (k, 2) int64 (layer, head)), their
value-weighted maps (``head_value_norms``, N = A·‖f_h(x_j)‖ as lenses.value_norms) and, when the whole rollout is
left out, rollout R(l) of each of their layers (``layer_rollout``, rows ``layer_index`` (m,) int64): rollout is
per layer, not per head (it composes every head of layers 0…l). ``--all-maps`` writes every map, value norm and
rollout layer as .npy files in the export folder (readable lazily: ``np.load(path, mmap_mode="r")``), streamed to
disk a block of rows at a time, after :func:`check_free_disk`; attention.npz then holds only the tokens (and the
``--heads`` arrays). Head images (heads/L<l>H<h>.<fmt>) are drawn for every head when every map fits the budget,
else for the ``--heads`` heads only: an image of each of 270 heads at 8,192 tokens is 270 maps computed and drawn.
"""
from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..display import format_bytes
from ..errors import ExportError, InputError

#: attention.npz holds an array of every head (maps, value norms, rollout) when it takes at most this many MiB.
DEFAULT_MAX_EXPORT_MB = 1024
#: The arrays of every head, in the order an export writes them.
FULL_ARRAYS = ("attentions", "value_norms", "rollout")
#: --all-maps: the .npy file of each of :data:`FULL_ARRAYS`.
NPY_FILES = {name: f"{name}.npy" for name in FULL_ARRAYS}
#: How to get an array the budget left out (summary.json's ``export.how_to_get`` and the warning).
HOW_TO_GET = ("--heads L.H,… writes those heads' maps and value norms and their layers' rollout into attention.npz; "
              "--all-maps writes every map as .npy files; --max-export-mb raises the budget")


def max_export_bytes(megabytes: float | None) -> int:
    """The export budget in bytes: ``megabytes`` MiB (None: :data:`DEFAULT_MAX_EXPORT_MB`); InputError for a
    negative, infinite or non-number value."""
    megabytes = DEFAULT_MAX_EXPORT_MB if megabytes is None else megabytes
    try:
        value = float(megabytes)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{megabytes!r} is not a number of megabytes (0 or more) for the export budget.")
    return int(value * 2**20)


def parse_export_heads(spec: str | None) -> list[tuple[int, int]]:
    """The syntax of ``export --heads``: ``"1.0,3.2"`` or the heads' names ``"L1H0,L3H2"`` (as ``ablate --heads``,
    ``analysis.measures.ablation.parse_head_list``) → [(1, 0), (3, 2)]; [] for None. InputError for a bad item or a
    head named twice."""
    from ..measures.ablation import parse_head_list

    return [] if spec is None else parse_head_list(spec)


def check_heads(heads, n_layer: int, n_head: int) -> tuple[tuple[int, int], ...]:
    """``heads`` as (layer, head) pairs that exist in a model of ``n_layer`` × ``n_head`` heads, in the order given
    (each once; none for none); InputError naming the first that does not ("L3H0 does not exist: …", as
    ``analysis.measures.ablation.check_heads`` says it)."""
    from ..measures.ablation import check_heads as checked

    return tuple(checked(((int(layer), int(head)) for layer, head in heads), n_layer, n_head))


@dataclass(frozen=True)
class ExportLayout:
    """What an export of an L × H-head, n-token result writes, and where (the module docstring's table)."""

    n_layer: int
    n_head: int
    n_tokens: int
    budget_bytes: int  # attention.npz holds an array of every head when it takes at most this
    heads: tuple[tuple[int, int], ...] = ()  # --heads: (layer, head) pairs, in the order asked
    all_maps: bool = False  # --all-maps: every head's arrays as .npy files

    def array_bytes(self, name: str) -> int:
        """Bytes of one of :data:`FULL_ARRAYS` in float32: L·H·n²·4 (maps, value norms) or L·n²·4 (rollout)."""
        L, H, n = self.n_layer, self.n_head, self.n_tokens
        return 4 * n * n * (L if name == "rollout" else L * H)

    def fits(self, name: str) -> bool:
        return self.array_bytes(name) <= self.budget_bytes

    @property
    def in_npz(self) -> tuple[str, ...]:
        """The arrays of every head that attention.npz holds whole."""
        return () if self.all_maps else tuple(a for a in FULL_ARRAYS if self.fits(a))

    @property
    def in_npy(self) -> tuple[str, ...]:
        """The arrays written as .npy files (:data:`NPY_FILES`)."""
        return FULL_ARRAYS if self.all_maps else ()

    @property
    def left_out(self) -> tuple[str, ...]:
        """The arrays of every head that the export does not hold (above the budget, without --all-maps)."""
        return tuple(a for a in FULL_ARRAYS if a not in self.in_npz and a not in self.in_npy)

    @property
    def rollout_layers(self) -> tuple[int, ...]:
        """The layers whose rollout ``layer_rollout`` holds: those of the --heads heads, when the whole rollout
        is left out."""
        if "rollout" not in self.left_out:
            return ()
        return tuple(sorted({layer for layer, _ in self.heads}))

    @property
    def plain(self) -> bool:
        """Every array of every head in attention.npz, as an export always wrote it (summary.json then has no
        ``export`` entry)."""
        return not self.left_out and not self.heads and not self.all_maps

    def image_heads(self) -> tuple[tuple[int, int], ...]:
        """The heads drawn as images: every head when every map fits the budget, else the --heads heads."""
        if self.fits("attentions"):
            return tuple((l, h) for l in range(self.n_layer) for h in range(self.n_head))
        return self.heads

    def disk_bytes(self) -> int:
        """An upper bound of the bytes the export's arrays take on disk: the .npy files exactly (header aside),
        attention.npz's arrays uncompressed."""
        n = self.n_tokens
        heads = 2 * len(self.heads) * 4 * n * n + 16 * len(self.heads)
        rollout_rows = len(self.rollout_layers) * 4 * n * n
        return sum(self.array_bytes(a) for a in (*self.in_npz, *self.in_npy)) + heads + rollout_rows

    def summary_fields(self) -> dict:
        """summary.json's ``export`` entry ({} for a :attr:`plain` layout): the budget, where each array is
        (a file name, or None: left out), what was left out and how to get it, the heads asked for, the layers of
        ``layer_rollout`` and the heads drawn."""
        if self.plain:
            return {}
        where = {a: ("attention.npz" if a in self.in_npz else NPY_FILES[a] if a in self.in_npy else None)
                 for a in FULL_ARRAYS}
        if self.heads:
            where.update(head_maps="attention.npz", head_value_norms="attention.npz", head_index="attention.npz")
        if self.rollout_layers:
            where.update(layer_rollout="attention.npz", layer_index="attention.npz")
        images = self.image_heads()
        every = len(images) == self.n_layer * self.n_head
        return {"export": {
            "max_export_bytes": self.budget_bytes,
            "arrays": where,
            "left_out": {a: self.array_bytes(a) for a in self.left_out},
            "how_to_get": HOW_TO_GET if self.left_out else "",
            "heads": [list(h) for h in self.heads],
            "rollout_layers": list(self.rollout_layers),
            "head_images": "every head" if every else [list(h) for h in images]}}

    def warning(self) -> str | None:
        """One sentence naming what attention.npz leaves out and how to get it, or None when nothing is."""
        if not self.left_out:
            return None
        names = [f"{a} ({format_bytes(self.array_bytes(a))})" for a in self.left_out]
        what = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        if self.heads:
            how = (f"it holds the {len(self.heads)} head{'s' if len(self.heads) > 1 else ''} asked for (head_maps); "
                   "--all-maps writes every map as .npy files")
        else:
            how = HOW_TO_GET
        images = "" if self.fits("attentions") or self.heads else ", and no head image is drawn"
        return (f"attention.npz leaves out {what}, above the export budget of {format_bytes(self.budget_bytes)}"
                f"{images}: {how} (summary.json says so too).")


def plan_export(n_layer: int, n_head: int, n_tokens: int, budget_bytes: int | None = None, heads=(),
                all_maps: bool = False) -> ExportLayout:
    """The :class:`ExportLayout` of a result's shape: ``budget_bytes`` None is :data:`DEFAULT_MAX_EXPORT_MB`;
    ``heads`` checked against the shape (InputError, :func:`check_heads`)."""
    budget = max_export_bytes(None) if budget_bytes is None else int(budget_bytes)
    return ExportLayout(int(n_layer), int(n_head), int(n_tokens), budget, check_heads(heads, n_layer, n_head),
                        bool(all_maps))


def layout_of(result, budget_bytes: int | None = None, heads=(), all_maps: bool = False) -> ExportLayout:
    """:func:`plan_export` for ``result``'s shape."""
    return plan_export(result.n_layer, result.n_head, result.n_tokens, budget_bytes, heads, all_maps)


def _existing(path: Path) -> Path:
    """The nearest folder at or above ``path`` that exists (where the export's file system is asked)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def check_free_disk(layout: ExportLayout, out_dir: Path) -> int:
    """The bytes ``layout`` needs at most (:meth:`ExportLayout.disk_bytes`), or ExportError (one sentence) when an
    --all-maps export needs more than the file system of ``out_dir`` has free (``shutil.disk_usage``). Creates
    nothing. Other layouts are not checked: their size is bounded by the budget, and a full disk still fails the
    write with nothing changed."""
    need = layout.disk_bytes()
    if not layout.all_maps:
        return need
    where = _existing(Path(out_dir).parent)
    free = shutil.disk_usage(where).free
    if need > free:
        raise ExportError(f"Every map of {layout.n_tokens:,} tokens takes {format_bytes(need)} on disk, more than the "
                          f"{format_bytes(free)} free on {where}: free some space, export to another disk, or use "
                          "--heads instead of --all-maps.")
    return need
