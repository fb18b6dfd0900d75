"""Path checks before anything is written: each refusal is one sentence naming the path — a name the file
system cannot hold, an output that is or holds an input, a link to nothing, a device, pipe or link where a
file would be renamed — and a target is where the kernel resolves it."""
import os
from pathlib import Path

import pytest

from analysis.errors import ExportError
from analysis.export.folders import check_export_target, write_file_atomically, write_folder_atomically
from analysis.export.paths import check_file_target, check_outputs_apart, path_problem
from helpers import folder_files as snapshot, folder_writer as writer

EXPORT = {"summary.json": '{"generator": "attnscope"}', "heads/L0H0.png": "png", "scores.csv": "csv"}


# ----------------------------------------------------------------------------- names the file system can hold
@pytest.mark.parametrize("check", [check_export_target, check_file_target])
def test_a_name_too_long_for_the_file_system_is_a_sentence(tmp_path, check):
    with pytest.raises(ExportError, match=r"a name in it is 300 bytes long \('a{24}…'\); the file system allows "
                                          r"at most 255 bytes per name"):
        check(tmp_path / ("a" * 300) / "x")
    with pytest.raises(ExportError, match=r"bytes long as a full path; the file system allows at most 4,095 bytes"):
        check(tmp_path.joinpath(*["d" * 200] * 25))
    assert path_problem(tmp_path / ("é" * 127)) is None and "256 bytes" in path_problem("é" * 128)


# ----------------------------------------------------------------------------- outputs apart from inputs
def test_outputs_are_compared_with_inputs_by_file_not_by_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    notes = tmp_path / "in" / "notes.txt"
    notes.write_text("text")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    os.link(notes, tmp_path / "hard.json")
    (tmp_path / "link.json").symlink_to(notes)
    (tmp_path / "dirlink").symlink_to(tmp_path / "in")
    inputs = [("--text-file in/notes.txt", "in/notes.txt"), ("--model model", model)]
    refused = {
        ("--json", "in/notes.txt", "file"): "--json in/notes.txt is --text-file in/notes.txt: AttnScope never writes",
        ("--json", "in/../in/notes.txt", "file"): "is --text-file in/notes.txt:",
        ("--json", "hard.json", "file"): "is --text-file in/notes.txt (the same file under another name: a hard link)",
        ("--json", "link.json", "file"): "is --text-file in/notes.txt (through a link)",
        ("--json", "dirlink/notes.txt", "file"): "(through a link)",
        ("--json", model / "config.json", "file"): "is config.json in --model model",
        ("--out", "in", "folder"): "--out in holds --text-file in/notes.txt: an export there would delete it",
        ("--out", "dirlink", "folder"): "--out dirlink holds --text-file in/notes.txt (through a link)",
        ("--out", "in/notes.txt", "folder"): "--out in/notes.txt is --text-file in/notes.txt",
        ("--out", "model", "folder"): "--out model is --model model",
        ("--out", ".", "folder"): "holds --text-file",
    }
    for output, words in refused.items():
        with pytest.raises(ExportError) as caught:
            check_outputs_apart(inputs, [output])
        assert words in str(caught.value), output
    for output in [("--json", "in/new.json", "file"), ("--out", "model/exports", "folder"), ("--out", "new", "folder")]:
        check_outputs_apart(inputs, [output])  # beside or inside an input: nothing of it is lost
    (tmp_path / "old").mkdir()
    os.link(notes, tmp_path / "old" / "copy.txt")
    with pytest.raises(ExportError, match=r"--out old holds copy.txt, the same file as --text-file in/notes.txt "
                                          r"\(a hard link\)"):
        check_outputs_apart(inputs, [("--out", "old", "folder")])


# ----------------------------------------------------------------------------- links, and one resolution of a target
def test_a_link_to_nothing_as_the_export_folder_says_so(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(ExportError) as caught:
        check_export_target(link)
    assert str(caught.value) == (f"{link} is a link to {tmp_path / 'gone'}, which does not exist: give a folder, "
                                 "or create the one the link points to.")
    assert "a file, not a folder" not in str(caught.value)


def test_an_export_goes_where_the_kernel_resolves_the_path_that_was_checked(tmp_path, monkeypatch):
    """``--out lnk/../o5`` with lnk → deep/x: abspath made it ./o5 (and replaced the export read from there)
    while the outputs-vs-inputs check resolved it as the kernel does, deep/o5."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep" / "x").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to("deep/x")
    write_folder_atomically(tmp_path / "o5", writer(EXPORT))
    before = snapshot(tmp_path / "o5")
    check_outputs_apart([("--text-file o5/summary.json", "o5/summary.json")], [("--out", "lnk/../o5", "folder")])
    assert check_export_target(Path("lnk/../o5")) == tmp_path / "deep" / "o5"
    write_folder_atomically(Path("lnk/../o5"), writer({"summary.json": "{}"}))
    assert snapshot(tmp_path / "o5") == before and (tmp_path / "deep" / "o5" / "summary.json").read_text() == "{}"
    assert check_file_target(Path("lnk/../a.json")) == tmp_path / "deep" / "a.json"


def test_the_current_folder_reached_through_a_linked_parent_is_refused(tmp_path, monkeypatch):
    (tmp_path / "cw" / "x").mkdir(parents=True)
    (tmp_path / "cwl").symlink_to("cw")
    monkeypatch.chdir(tmp_path / "cw" / "x")
    with pytest.raises(ExportError, match="is the current folder or holds it"):
        check_export_target(tmp_path / "cwl" / "x")
    with pytest.raises(ExportError, match="is the current folder or holds it"):
        check_export_target(tmp_path / "cwl")


@pytest.mark.parametrize("check", [check_export_target, check_file_target])
def test_a_parent_that_is_a_link_to_nothing_is_named_with_the_end_of_its_chain(tmp_path, check):
    (tmp_path / "dz1").symlink_to("nowhere")
    (tmp_path / "dz2").symlink_to("dz1")
    (tmp_path / "loopa").symlink_to("loopb")
    (tmp_path / "loopb").symlink_to("loopa")
    with pytest.raises(ExportError) as caught:
        check(tmp_path / "dz2" / "new")
    assert f"{tmp_path / 'dz2'} is a link to {tmp_path / 'nowhere'}, which does not exist" in str(caught.value)
    assert "is a file" not in str(caught.value)
    with pytest.raises(ExportError, match="loopa is a loop of links"):
        check(tmp_path / "loopa" / "new")
    assert not (tmp_path / "nowhere").exists()


def test_a_link_to_a_device_as_the_export_folder_is_called_so(tmp_path):
    (tmp_path / "full").symlink_to("/dev/null")
    with pytest.raises(ExportError, match=r"full is a link to a device \(/dev/null\), not a folder"):
        check_export_target(tmp_path / "full")


# ----------------------------------------------------------------------------- what a file export may replace
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
            write_file_atomically(path, lambda p: p.write_text("new"))
        assert not path.is_file() or path.is_symlink()  # still what it was
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and target.read_text() == "kept"
    with pytest.raises(ExportError, match="No file name"):
        check_file_target(" ")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="is a file, not a folder"):
        check_file_target(tmp_path / "file" / "out.json")
    assert check_file_target(tmp_path / "new" / "deeper" / "out.json") == tmp_path / "new" / "deeper" / "out.json"
    assert not (tmp_path / "new").exists()  # creates nothing
