"""The data files of a result: the same result gives the same bytes, and every data format of the format
table writes a file of one head and a file of every head that reads back as that result."""
import csv
import json

import numpy as np
import pytest

from analysis.export.formats import DATA_FORMATS, IMAGE_FORMATS
from analysis.export.writers import write_attention_npz


def test_npz_is_byte_for_byte_reproducible(tiny_result, tmp_path, monkeypatch):
    import time

    first = write_attention_npz(tiny_result, tmp_path / "1.npz").read_bytes()
    later = time.time() + 3 * 86400
    monkeypatch.setattr(time, "time", lambda: later)  # numpy's savez stamps the clock into each entry
    second = write_attention_npz(tiny_result, tmp_path / "2.npz").read_bytes()
    assert first == second
    with np.load(tmp_path / "2.npz") as data:
        np.testing.assert_array_equal(data["attentions"], tiny_result.attentions)
        assert list(data["tokens"]) == list(tiny_result.tokens) and data["token_ids"].dtype == np.int64


# ----------------------------------------------------------------------------- the format table
def read_back(path, fmt):
    """What a data file holds, as (attention array or None, table rows or None)."""
    if fmt == "npz":
        with np.load(path) as data:
            return data["attentions"], None
    if fmt == "json":
        return np.asarray(json.loads(path.read_text(encoding="utf-8"))["attentions"]), None
    with path.open(newline="", encoding="utf-8") as f:
        return None, list(csv.reader(f))


def test_the_format_table_names_each_format_once():
    assert tuple(DATA_FORMATS) == ("npz", "csv", "json") and IMAGE_FORMATS == ("png", "svg", "pdf")
    assert all(name == fmt.name for name, fmt in DATA_FORMATS.items())
    assert not set(DATA_FORMATS) & set(IMAGE_FORMATS)
    assert [name for name, fmt in DATA_FORMATS.items() if fmt.for_grid] == ["npz"]


@pytest.mark.parametrize("fmt", list(DATA_FORMATS))
def test_every_data_format_writes_one_head_and_every_head(tiny_result, tmp_path, fmt):
    from analysis.measures.head_scores import all_scores

    r = tiny_result
    head_file, grid_file = tmp_path / f"head.{fmt}", tmp_path / f"grid.{fmt}"
    DATA_FORMATS[fmt].head(r, head_file, 1, 0)
    DATA_FORMATS[fmt].grid(r, all_scores(r), grid_file)
    head, head_rows = read_back(head_file, fmt)
    grid, grid_rows = read_back(grid_file, fmt)
    if fmt == "csv":  # one head's map as a table; every head as its scores, one row per head
        assert len(head_rows) == r.n_tokens + 1 and head_rows[0][0] == "query \\ key"
        assert float(head_rows[1][1]) == pytest.approx(float(r.attentions[1, 0, 0, 0]), rel=1e-5)
        assert grid_rows[0][:2] == ["layer", "head"] and len(grid_rows) == r.n_layer * r.n_head + 1
        return
    np.testing.assert_allclose(head, r.attentions[1, 0], atol=1e-6)  # (query, key)
    np.testing.assert_allclose(grid, r.attentions, atol=1e-6)  # (layer, head, query, key)
