"""Issue 10: an export replaces an earlier one as a whole or leaves it exactly as it was.

Before: stale files of a bigger export stayed, a failed move left new data under an old
summary.json, a folder named summary.json gave "unexpected IsADirectoryError", a full disk left
partial files, failed exports left the folders they created, and .npz files differed byte-wise.
"""
import errno
import json
import os

import numpy as np
import pytest

from analysis.export import writers as ex
from analysis.errors import ExportError, Interrupted
from helpers import folder_files as snapshot, folder_writer as writer, hidden_leftovers as leftovers




def test_a_new_export_replaces_the_old_one_as_a_whole(tmp_path):
    out = tmp_path / "out"
    ex.write_folder_atomically(out, writer({f"heads/L{i}H0.png": "old" for i in range(4)} | {"summary.json": "{}"}))
    written = ex.write_folder_atomically(out, writer({"heads/L0H0.svg": "new", "summary.json": "{}"}))
    assert sorted(p.relative_to(out).as_posix() for p in written) == ["heads/L0H0.svg", "summary.json"]
    assert set(snapshot(out)) == {"heads/L0H0.svg", "summary.json", ex.MARKER}  # no stale PNGs
    assert json.loads((out / ex.MARKER).read_text()) == {"generator": "attnscope",
                                                         "files": ["heads/L0H0.svg", "summary.json"],
                                                         "folders": ["heads"]}
    assert leftovers(tmp_path) == []


def test_an_empty_folder_is_filled_and_keeps_its_place(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    ex.write_folder_atomically(out, writer({"a.csv": "x"}))
    assert (out / "a.csv").read_text() == "x" and oct(out.stat().st_mode & 0o777) != "0o700"


def test_a_folder_of_other_files_is_refused_and_untouched(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    (out / "summary.json").mkdir()  # the case that gave "unexpected IsADirectoryError"
    with pytest.raises(ExportError, match="not an AttnScope export"):
        ex.write_folder_atomically(out, writer({"a.csv": "x"}))
    assert (out / "thesis.tex").read_text() == "precious" and leftovers(tmp_path) == []


@pytest.mark.parametrize("make", ["file", "empty", "cwd"])
def test_impossible_targets_are_sentences(tmp_path, monkeypatch, make):
    target = tmp_path / "summary.json"
    if make == "file":
        target.write_text("{}")
        match = "is a file, not a folder"
    elif make == "empty":
        target = ""
        match = "No export folder given"
    else:
        monkeypatch.chdir(tmp_path)
        target = tmp_path
        match = "current folder"
    with pytest.raises(ExportError, match=match):
        ex.write_folder_atomically(target, writer({"a": "x"}))


@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "disk is full"), (errno.EACCES, "permission denied")])
def test_a_failing_writer_leaves_the_earlier_export_as_it_was(tmp_path, code, words):
    out = tmp_path / "out"
    ex.write_folder_atomically(out, writer({"a.csv": "old", "summary.json": "{}"}))
    before = snapshot(out)

    def full_disk(folder):
        (folder / "a.csv").write_text("half")
        raise OSError(code, os.strerror(code))

    with pytest.raises(ExportError, match=words) as caught:
        ex.write_folder_atomically(out, full_disk)
    assert "\n" not in str(caught.value) and "Errno" not in str(caught.value)
    assert snapshot(out) == before and leftovers(tmp_path) == []


def test_an_interruption_between_files_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    ex.write_folder_atomically(out, writer({"a.csv": "old"}))
    before = snapshot(out)
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 2:  # after the writer ran, before the swap
            raise Interrupted("interrupted (Ctrl+C)", 2)

    with pytest.raises(Interrupted):
        ex.write_folder_atomically(out, writer({"b.csv": "new"}), check=check)
    assert snapshot(out) == before and leftovers(tmp_path) == []


def test_a_failed_swap_puts_the_earlier_export_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    ex.write_folder_atomically(out, writer({"a.csv": "old"}))
    before = snapshot(out)
    real_rename = os.rename
    renames = []

    def flaky(src, dst):
        renames.append((src, dst))
        if len(renames) == 2:  # old export aside worked; moving the new one in fails
            raise OSError(errno.EIO, "Input/output error")
        return real_rename(src, dst)

    monkeypatch.setattr(ex.os, "rename", flaky)
    with pytest.raises(ExportError, match="input/output error"):
        ex.write_folder_atomically(out, writer({"b.csv": "new"}))
    monkeypatch.undo()
    assert len(renames) == 3 and snapshot(out) == before and leftovers(tmp_path) == []


def test_a_failed_export_removes_the_folders_it_created(tmp_path):
    def full_disk(folder):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ExportError, match="disk is full"):
        ex.write_folder_atomically(tmp_path / "a" / "b" / "c", full_disk)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "a").mkdir()  # a folder that was there before stays
    with pytest.raises(ExportError):
        ex.write_folder_atomically(tmp_path / "a" / "b" / "c", full_disk)
    assert [p.name for p in tmp_path.iterdir()] == ["a"] and list((tmp_path / "a").iterdir()) == []


def test_write_file_atomically(tmp_path):
    target = tmp_path / "fig.png"
    target.write_text("old")
    assert ex.write_file_atomically(target, lambda p: p.write_text("new")) == target
    assert target.read_text() == "new"

    def fail(p):
        p.write_text("partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ExportError, match="disk is full"):
        ex.write_file_atomically(target, fail)
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ExportError, match="is a folder"):
        ex.write_file_atomically(tmp_path / "dir.csv", lambda p: p.write_text("x"))
    seen = []
    ex.write_file_atomically(tmp_path / "new" / "x.svg", lambda p: seen.append(p.suffix) or p.write_text("<svg/>"))
    assert seen == [".svg"]  # the temporary file keeps the extension writers choose the format by


def test_a_device_pipe_or_link_is_never_replaced_by_a_file(tmp_path):
    """The rename once turned a copy of /dev/null, a FIFO and a link to stdout into plain files (as root)."""
    import stat

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    target = tmp_path / "real.json"
    target.write_text("kept")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    cases = [(fifo, "not a regular file"), (link, "is a link")]
    if os.geteuid() == 0:  # only root may make device nodes
        null = tmp_path / "null.json"
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        cases.append((null, "not a regular file"))
    for path, why in cases:
        with pytest.raises(ExportError, match=why):
            ex.write_file_atomically(path, lambda p: p.write_text("new"))
        assert not path.is_file() or path.is_symlink()  # still what it was
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and target.read_text() == "kept"
    with pytest.raises(ExportError, match="No file name"):
        ex.check_file_target(" ")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="is a file, not a folder"):
        ex.check_file_target(tmp_path / "file" / "out.json")
    assert ex.check_file_target(tmp_path / "new" / "deeper" / "out.json") == tmp_path / "new" / "deeper" / "out.json"
    assert not (tmp_path / "new").exists()  # creates nothing


def test_npz_is_byte_for_byte_reproducible(tiny_result, tmp_path, monkeypatch):
    import time

    first = ex.write_attention_npz(tiny_result, tmp_path / "1.npz").read_bytes()
    later = time.time() + 3 * 86400
    monkeypatch.setattr(time, "time", lambda: later)  # numpy's savez stamps the clock into each entry
    second = ex.write_attention_npz(tiny_result, tmp_path / "2.npz").read_bytes()
    assert first == second
    with np.load(tmp_path / "2.npz") as data:
        np.testing.assert_array_equal(data["attentions"], tiny_result.attentions)
        assert list(data["tokens"]) == list(tiny_result.tokens) and data["token_ids"].dtype == np.int64


def test_export_bundle_writes_a_complete_recognisable_folder(tiny_model, tiny_result, tmp_path):
    from analysis.measures.head_scores import all_scores
    from analysis.measures.parity import parity_report

    parity = parity_report(tiny_result, [tiny_model.attention_weights(l) for l in range(tiny_model.n_layer)])
    out = tmp_path / "export"
    written = ex.export_bundle(out, tiny_result, all_scores(tiny_result), parity)
    assert sorted(p.name for p in written) == ["attention.npz", "parity.json", "scores.csv", "scores_tl.csv", "summary.json"]
    assert ex.is_attnscope_export(out) and not ex.is_attnscope_export(tmp_path)
    assert json.loads((out / "summary.json").read_text())["generator"] == "attnscope"
    assert json.loads((out / "parity.json").read_text())["passed"] is True
