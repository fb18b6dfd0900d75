"""What an export holds, the one definition the command line and the window call: a complete, recognisable
folder with parity and value norms computed from the model, and figures named as the command line names them."""
import json

import numpy as np

from analysis.export.contents import export_contents, figure_files, write_export
from analysis.export.folders import is_attnscope_export


def test_an_export_is_a_complete_recognisable_folder(tiny_model, tiny_result, tmp_path):
    from analysis.measures.head_scores import all_scores

    contents = export_contents(tiny_model, tiny_result, all_scores(tiny_result))
    out = tmp_path / "export"
    written = write_export(out, contents)
    assert sorted(p.name for p in written) == ["attention.npz", "parity.json", "scores.csv", "scores_tl.csv",
                                               "summary.json"]
    assert is_attnscope_export(out) and not is_attnscope_export(tmp_path)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generator"] == "attnscope" and summary["timings"] == {**tiny_result.timings, "arrays_s": summary["timings"]["arrays_s"]}  # none given
    assert json.loads((out / "parity.json").read_text())["passed"] is True
    with np.load(out / "attention.npz") as data:
        assert sorted(data.files) == ["attentions", "rollout", "token_ids", "tokens", "value_norms"]
        np.testing.assert_array_equal(data["value_norms"], contents.model_lenses["value_norms"].value_norms)
    assert set(contents.timings) == {"parity_s", "value_norms_s"}


def test_the_options_reach_their_files(tiny_model, tiny_result, tmp_path):
    from analysis.measures.head_scores import all_scores

    contents = export_contents(tiny_model, tiny_result, all_scores(tiny_result), parity_dtype="float64",
                               sink_epsilon=0.5, tl_options={"error_measure": "abs", "exclude_bos": True})
    write_export(tmp_path / "out", contents, timings={"load_s": 1.0})
    assert json.loads((tmp_path / "out" / "parity.json").read_text())["manual_dtype"] == "float64"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["sink_epsilon"] == 0.5 and summary["timings"]["load_s"] == 1.0
    assert (tmp_path / "out" / "scores_tl.csv").read_text().splitlines()[1].endswith(",abs,true,false")


def test_the_image_writer_draws_into_the_folder_before_the_summary(tiny_model, tiny_result, tmp_path):
    from analysis.measures.head_scores import all_scores

    contents = export_contents(tiny_model, tiny_result, all_scores(tiny_result))
    drawn = []

    def image_writer(folder):
        drawn.append(sorted(p.name for p in folder.iterdir()))
        (folder / "grid.png").write_bytes(b"png")
        return [folder / "grid.png"]

    written = write_export(tmp_path / "out", contents, image_writer)
    assert drawn == [["attention.npz", "parity.json", "scores.csv", "scores_tl.csv"]]
    assert "grid.png" in {p.name for p in written}


def test_figures_are_the_grid_then_every_head():
    assert figure_files(2, 2, "svg") == [("grid.svg", None, None), ("heads/L0H0.svg", 0, 0), ("heads/L0H1.svg", 0, 1),
                                         ("heads/L1H0.svg", 1, 0), ("heads/L1H1.svg", 1, 1)]
    assert figure_files(1, 1, "png", "")[1] == ("L0H0.png", 0, 0)
