"""Exports at any length (analysis/export/layout.py, arrays.py): which arrays the budget keeps, the --heads arrays,
--all-maps' .npy files, and the refusals (disk too small, a head that does not exist). On-demand results come from
the session's tiny GPT-2 with ATTNSCOPE_KEEP_MAPS_MB=0; their numbers are checked against the same text's kept
maps and lenses."""
import json
import shutil

import numpy as np
import pytest

from analysis.errors import ExportError, InputError
from analysis.export import layout as layout_module
from analysis.export.contents import export_contents, write_export
from analysis.export.layout import DEFAULT_MAX_EXPORT_MB, layout_of, max_export_bytes, parse_export_heads, plan_export
from analysis.export.writers import NpzWriter, _savez_deterministic
from analysis.measures import lenses
from analysis.measures.head_scores import all_scores

from helpers import TEXT

ON_DEMAND_ATOL = 1e-5  # on-demand weights against the eager capture's (qk_capture.head_weights' promise)


@pytest.fixture(scope="module")
def on_demand(tiny_model):
    """The session text run with every map computed on demand (and measured, as the commands run it)."""
    from analysis.measures.measured import run_measured
    from analysis.run import memory

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(memory.KEEP_MAPS_ENV, "0")
        result = run_measured(tiny_model, TEXT, bos=True)
    assert not result.maps_kept
    return result


def export(tmp_path, loaded, result, name="x", rollout_skip_first=False, **layout):
    contents = export_contents(loaded, result, all_scores(result), layout=layout_of(result, **layout),
                               rollout_skip_first=rollout_skip_first)
    write_export(tmp_path / name, contents)
    with np.load(tmp_path / name / "attention.npz") as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads((tmp_path / name / "summary.json").read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------- the layout
def test_the_budget_keeps_each_array_that_fits_and_says_what_it_left_out():
    # SmolLM2's shape at 2,048 tokens: the maps and value norms 4.22 GiB each, rollout 480 MiB
    at_2048 = plan_export(30, 9, 2048, max_export_bytes(DEFAULT_MAX_EXPORT_MB))
    assert at_2048.array_bytes("attentions") == 30 * 9 * 2048 ** 2 * 4 == at_2048.array_bytes("value_norms")
    assert at_2048.array_bytes("rollout") == 30 * 2048 ** 2 * 4
    assert at_2048.in_npz == ("rollout",) and at_2048.left_out == ("attentions", "value_norms")
    assert at_2048.image_heads() == () and at_2048.rollout_layers == ()
    warning = at_2048.warning()
    assert "leaves out attentions (4.22 GiB) and value_norms (4.22 GiB), above the export budget of 1.00 GiB" in warning and "--all-maps" in warning
    fields = at_2048.summary_fields()["export"]
    assert fields["arrays"] == {"attentions": None, "value_norms": None, "rollout": "attention.npz"}
    assert fields["left_out"] == {"attentions": 30 * 9 * 2048 ** 2 * 4, "value_norms": 30 * 9 * 2048 ** 2 * 4}
    # at 8,192 tokens rollout (7.5 GiB) goes too; the heads asked for get their layers' rollout instead
    at_8192 = plan_export(30, 9, 8192, heads=[(3, 1), (3, 2), (0, 4)])
    assert at_8192.left_out == ("attentions", "value_norms", "rollout") and at_8192.rollout_layers == (0, 3)
    assert at_8192.image_heads() == ((3, 1), (3, 2), (0, 4))
    # a short text: everything as an export always wrote it, and no export entry in summary.json
    short = plan_export(30, 9, 512)
    assert short.plain and short.in_npz == ("attentions", "value_norms", "rollout") and short.warning() is None
    assert short.summary_fields() == {} and len(short.image_heads()) == 270
    assert plan_export(30, 9, 512, all_maps=True).in_npy == ("attentions", "value_norms", "rollout")
    assert plan_export(30, 9, 512, all_maps=True).in_npz == ()


def test_heads_are_read_in_either_spelling_and_checked_against_the_model():
    assert parse_export_heads("1.0, L3H2,l0h1") == [(1, 0), (3, 2), (0, 1)]
    with pytest.raises(InputError, match="^L1H0 is named twice in '1.0,L1H0'"):
        parse_export_heads("1.0,L1H0")
    with pytest.raises(InputError, match="'1.x' is not a head"):
        parse_export_heads("1.x")
    with pytest.raises(InputError, match=r"^L3H0 does not exist: the model has layers 0–2 and heads 0–3\.$"):
        plan_export(3, 4, 10, heads=[(3, 0)])
    with pytest.raises(InputError, match="not a number of megabytes"):
        max_export_bytes(-1)


# ----------------------------------------------------------------------------- attention.npz
def test_a_streamed_entry_is_the_bytes_of_the_whole_array(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.random((3, 4, 50, 50), dtype=np.float32)
    _savez_deterministic(tmp_path / "whole.npz", {"attentions": a, "token_ids": np.arange(50)})
    with NpzWriter(tmp_path / "streamed.npz") as npz:
        npz.stream("attentions", a.shape, (a[l, h] for l in range(3) for h in range(4)))
        npz.array("token_ids", np.arange(50))
    assert (tmp_path / "streamed.npz").read_bytes() == (tmp_path / "whole.npz").read_bytes()
    with pytest.raises(ValueError, match="bytes streamed"):
        with NpzWriter(tmp_path / "short.npz") as npz:
            npz.stream("attentions", a.shape, iter([a[0, 0]]))


def test_an_on_demand_export_within_the_budget_holds_what_the_kept_one_holds(tmp_path, tiny_model, tiny_result,
                                                                           on_demand):
    kept, kept_summary = export(tmp_path, tiny_model, tiny_result, "kept")
    streamed, summary = export(tmp_path, tiny_model, on_demand, "streamed")
    assert list(streamed) == list(kept) == ["attentions", "value_norms", "rollout", "tokens", "token_ids"]
    np.testing.assert_allclose(streamed["attentions"], kept["attentions"], atol=ON_DEMAND_ATOL, rtol=0)
    np.testing.assert_allclose(streamed["value_norms"], kept["value_norms"], rtol=1e-4, atol=ON_DEMAND_ATOL)
    np.testing.assert_allclose(streamed["rollout"], kept["rollout"], atol=ON_DEMAND_ATOL, rtol=0)
    assert "export" not in summary and "export" not in kept_summary  # nothing left out: as exports always were
    assert summary["sink_rate"] == kept_summary["sink_rate"]


def test_above_the_budget_the_arrays_that_do_not_fit_are_left_out(tmp_path, tiny_model, on_demand):
    n = on_demand.n_tokens
    budget = 3 * n * n * 4  # rollout (3 layers) fits, every map (3 × 4 heads) does not
    arrays, summary = export(tmp_path, tiny_model, on_demand, budget_bytes=budget)
    assert list(arrays) == ["rollout", "tokens", "token_ids"]
    entry = summary["export"]
    assert entry["arrays"] == {"attentions": None, "value_norms": None, "rollout": "attention.npz"}
    assert set(entry["left_out"]) == {"attentions", "value_norms"} and "--all-maps" in entry["how_to_get"]
    assert entry["head_images"] == []
    arrays, _ = export(tmp_path, tiny_model, on_demand, "none", budget_bytes=0)
    assert list(arrays) == ["tokens", "token_ids"]


@pytest.mark.parametrize("kind", ["kept", "on demand"])
def test_heads_write_those_heads_whole_maps_value_norms_and_their_layers_rollout(tmp_path, tiny_model, tiny_result,
                                                                                 on_demand, kind):
    result = tiny_result if kind == "kept" else on_demand
    heads = [(2, 1), (0, 3), (2, 0)]
    arrays, summary = export(tmp_path, tiny_model, result, budget_bytes=0, heads=heads)
    assert list(arrays) == ["head_maps", "head_value_norms", "head_index", "layer_rollout", "layer_index", "tokens",
                            "token_ids"]
    n = result.n_tokens
    assert arrays["head_maps"].dtype == np.float32 and arrays["head_maps"].shape == (3, n, n)
    assert arrays["head_index"].dtype == np.int64 and arrays["head_index"].tolist() == [[2, 1], [0, 3], [2, 0]]
    assert arrays["layer_index"].dtype == np.int64 and arrays["layer_index"].tolist() == [0, 2]
    norms = lenses.value_norms(tiny_model, tiny_result).value_norms  # the kept maps' lenses
    rollout = lenses.rollout(tiny_result.attentions)
    for k, (layer, head) in enumerate(heads):
        np.testing.assert_array_equal(arrays["head_maps"][k], result.head_map(layer, head))
        np.testing.assert_allclose(arrays["head_maps"][k], tiny_result.attentions[layer, head],
                                   atol=ON_DEMAND_ATOL, rtol=0)
        np.testing.assert_allclose(arrays["head_value_norms"][k], norms[layer, head], rtol=1e-4, atol=ON_DEMAND_ATOL)
    if kind == "kept":  # the very numbers of the whole export's arrays
        np.testing.assert_array_equal(arrays["head_value_norms"], norms[[2, 0, 2], [1, 3, 0]])
    np.testing.assert_allclose(arrays["layer_rollout"], rollout[[0, 2]], atol=ON_DEMAND_ATOL, rtol=1e-6)
    entry = summary["export"]
    assert entry["heads"] == [[2, 1], [0, 3], [2, 0]] and entry["rollout_layers"] == [0, 2]
    assert entry["head_images"] == [[2, 1], [0, 3], [2, 0]]
    # alongside the whole maps when they fit: no layer_rollout then (the whole rollout is there)
    arrays, _ = export(tmp_path, tiny_model, result, "both", heads=[(1, 1)])
    assert list(arrays) == ["attentions", "value_norms", "rollout", "head_maps", "head_value_norms", "head_index",
                            "tokens", "token_ids"]
    np.testing.assert_array_equal(arrays["head_maps"][0], arrays["attentions"][1, 1])


# ----------------------------------------------------------------------------- --all-maps
@pytest.mark.parametrize("kind", ["kept", "on demand"])
def test_all_maps_are_npy_files_read_lazily_equal_to_the_kept_maps_and_lenses(tmp_path, tiny_model, tiny_result,
                                                                             on_demand, kind):
    result = tiny_result if kind == "kept" else on_demand
    arrays, summary = export(tmp_path, tiny_model, result, all_maps=True)
    assert list(arrays) == ["tokens", "token_ids"]
    assert summary["export"]["arrays"] == {"attentions": "attentions.npy", "value_norms": "value_norms.npy",
                                           "rollout": "rollout.npy"}
    folder = tmp_path / "x"
    maps = np.load(folder / "attentions.npy", mmap_mode="r")
    norms = np.load(folder / "value_norms.npy", mmap_mode="r")
    rollout = np.load(folder / "rollout.npy", mmap_mode="r")
    assert isinstance(maps, np.memmap) and maps.dtype == np.float32 and maps.shape == tiny_result.attentions.shape
    assert norms.shape == maps.shape and rollout.shape == (3, result.n_tokens, result.n_tokens)
    expected_norms = lenses.value_norms(tiny_model, tiny_result).value_norms
    if kind == "kept":  # the same numbers as the in-memory arrays, to the bit (rollout: the triangular product)
        np.testing.assert_array_equal(maps, tiny_result.attentions)
        np.testing.assert_array_equal(norms, expected_norms)
    np.testing.assert_allclose(maps, tiny_result.attentions, atol=ON_DEMAND_ATOL, rtol=0)
    np.testing.assert_allclose(norms, expected_norms, rtol=1e-4, atol=ON_DEMAND_ATOL)
    np.testing.assert_allclose(rollout, lenses.rollout(tiny_result.attentions), atol=ON_DEMAND_ATOL, rtol=1e-6)
    marker = json.loads((folder / ".attnscope-export.json").read_text())
    assert {"attentions.npy", "value_norms.npy", "rollout.npy"} <= set(marker["files"])


def test_all_maps_is_refused_when_the_disk_is_too_small_and_nothing_is_written(tmp_path, tiny_model, on_demand,
                                                                               monkeypatch):
    contents = export_contents(tiny_model, on_demand, all_scores(on_demand), layout=layout_of(on_demand, all_maps=True))
    real = shutil.disk_usage
    monkeypatch.setattr(layout_module.shutil, "disk_usage",
                        lambda path: real(path)._replace(free=contents.layout.disk_bytes() - 1))
    with pytest.raises(ExportError, match=r"^Every map of \d+ tokens takes .* on disk, more than the .* free on "):
        write_export(tmp_path / "x", contents)
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing beside it
    monkeypatch.setattr(layout_module.shutil, "disk_usage",
                        lambda path: real(path)._replace(free=contents.layout.disk_bytes()))
    write_export(tmp_path / "x", contents)  # exactly enough
    assert (tmp_path / "x" / "rollout.npy").is_file()


# ----------------------------------------------------------------------------- rollout, first input hidden
@pytest.mark.parametrize("kind", ["kept", "on demand"])
def test_rollout_skip_first_reaches_every_rollout_array_and_the_summary_says_so(tmp_path, tiny_model, tiny_result,
                                                                               on_demand, kind):
    """The whole rollout (from the lens in memory, or streamed), --heads' layer_rollout and --all-maps' rollout.npy
    are lenses.rollout_skip_first of R with the option, R itself without; summary.json's rollout_skip_first says
    which, always."""
    result = tiny_result if kind == "kept" else on_demand
    r = lenses.rollout(tiny_result.attentions)
    skipped = lenses.rollout_skip_first(r)
    close = dict(atol=10 * ON_DEMAND_ATOL, rtol=1e-5, equal_nan=True)  # R's on-demand error, over 1 − R[i, 0]
    arrays, summary = export(tmp_path, tiny_model, result, "plain")
    assert summary["rollout_skip_first"] is False and not np.isnan(arrays["rollout"]).any()
    np.testing.assert_allclose(arrays["rollout"], r, atol=ON_DEMAND_ATOL, rtol=0)
    arrays, summary = export(tmp_path, tiny_model, result, "whole", rollout_skip_first=True)
    assert summary["rollout_skip_first"] is True and "export" not in summary
    assert arrays["rollout"].dtype == np.float32 and np.isnan(arrays["rollout"][..., 0]).all()
    if kind == "kept":  # the lens computed in memory: the very numbers
        np.testing.assert_array_equal(arrays["rollout"], skipped)
    np.testing.assert_allclose(arrays["rollout"], skipped, **close)
    arrays, summary = export(tmp_path, tiny_model, result, "heads", rollout_skip_first=True, budget_bytes=0,
                             heads=[(2, 1)])
    assert summary["rollout_skip_first"] is True and arrays["layer_index"].tolist() == [2]
    np.testing.assert_allclose(arrays["layer_rollout"], skipped[[2]], **close)
    _, summary = export(tmp_path, tiny_model, result, "npy", rollout_skip_first=True, all_maps=True)
    assert summary["rollout_skip_first"] is True
    np.testing.assert_allclose(np.load(tmp_path / "npy" / "rollout.npy", mmap_mode="r"), skipped, **close)


# ----------------------------------------------------------------------------- rollout, layer after layer
@pytest.mark.parametrize("causal", [True, False])
def test_iter_rollout_composes_layer_after_layer_as_lenses_rollout(monkeypatch, causal):
    """Small blocks and small product parts, so that every path of the in-place, last-block-first product runs."""
    from analysis.run.qk_capture import StoredMaps

    rng = np.random.default_rng(4)
    n = 23
    scores = rng.normal(size=(4, 3, n, n)) * 3
    if causal:
        scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
    a = np.exp(scores - scores.max(-1, keepdims=True))
    a = (a / a.sum(-1, keepdims=True)).astype(np.float32)  # (L, H, n, n), rows sum to 1
    monkeypatch.setattr(lenses, "ROLLOUT_PRODUCT_ROWS", 2)
    seen_blocks = []
    got = [r.copy() for _, r in lenses.iter_rollout(StoredMaps(a), causal=causal, rows_per_block=5,
                                                     on_block=lambda l, rows, w: seen_blocks.append((l, rows.start)))]
    np.testing.assert_allclose(np.stack(got), lenses.rollout(a), rtol=1e-6, atol=1e-7)
    assert sorted(seen_blocks) == [(l, s) for l in range(4) for s in range(0, n, 5)]  # every block read once
    first_two = [r.copy() for _, r in lenses.iter_rollout(StoredMaps(a), causal=causal, last=1)]
    assert len(first_two) == 2


def test_the_rollout_lens_of_an_on_demand_result_is_the_kept_maps_rollout(tiny_model, tiny_result, on_demand):
    values = lenses.compute_lenses(lenses.LensInputs(on_demand, tiny_model), [lenses.lens_named("rollout")])
    assert values["rollout"].dtype == np.float32 and not values["rollout"].flags.writeable
    np.testing.assert_allclose(values["rollout"], lenses.rollout(tiny_result.attentions), atol=ON_DEMAND_ATOL, rtol=0)


def test_a_file_of_every_head_of_an_on_demand_result_is_written_within_the_budget_else_refused(
        tmp_path, tiny_result, on_demand, monkeypatch):
    from analysis.export import writers

    writers.write_attention_npz(on_demand, tmp_path / "all.npz")
    with np.load(tmp_path / "all.npz") as data:
        assert data.files == ["attentions", "tokens", "token_ids"]
        np.testing.assert_allclose(data["attentions"], tiny_result.attentions, atol=ON_DEMAND_ATOL, rtol=0)
    writers.write_head_csv(on_demand, tmp_path / "head.csv", 1, 2)  # one head: result.head_map
    assert len((tmp_path / "head.csv").read_text(encoding="utf-8").splitlines()) == 1 + on_demand.n_tokens
    monkeypatch.setattr(layout_module, "DEFAULT_MAX_EXPORT_MB", 0)
    for write in (writers.write_attention_npz, writers.write_result_json):
        with pytest.raises(ExportError, match=r"^Every head's map of \d+ tokens takes .*--all-maps\.$"):
            write(on_demand, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
