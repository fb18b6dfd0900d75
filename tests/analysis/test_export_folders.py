"""Export folders are written whole or not at all, and never destroy what AttnScope did not write.

An export replaces an earlier one as a whole or leaves it exactly as it was; a user's own file saved in an
export is named and kept; what cannot be deleted is named in a warning; what an export killed midway left is
removed by the next one; single files are renamed into place only when complete.
"""
import errno
import json
import os
import subprocess
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from analysis.errors import ExportError, Interrupted
from analysis.export.folders import (_hidden_prefix, check_export_target, not_written_by_attnscope,
                                     write_file_atomically, write_folder_atomically)
from analysis.export.names import MARKER
from helpers import folder_files as snapshot, folder_writer as writer, hidden_leftovers as hidden

ROOT = Path(__file__).resolve().parents[2]
EXPORT = {"summary.json": '{"generator": "attnscope"}', "heads/L0H0.png": "png", "scores.csv": "csv"}


# ----------------------------------------------------------------------------- replaced whole, or left as it was
def test_a_new_export_replaces_the_old_one_as_a_whole(tmp_path):
    out = tmp_path / "out"
    write_folder_atomically(out, writer({f"heads/L{i}H0.png": "old" for i in range(4)} | {"summary.json": "{}"}))
    written = write_folder_atomically(out, writer({"heads/L0H0.svg": "new", "summary.json": "{}"}))
    assert sorted(p.relative_to(out).as_posix() for p in written) == ["heads/L0H0.svg", "summary.json"]
    assert set(snapshot(out)) == {"heads/L0H0.svg", "summary.json", MARKER}  # no stale PNGs
    assert json.loads((out / MARKER).read_text()) == {"generator": "attnscope",
                                                      "files": ["heads/L0H0.svg", "summary.json"],
                                                      "folders": ["heads"]}
    assert hidden(tmp_path) == []


def test_an_empty_folder_is_filled_and_keeps_its_place(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    write_folder_atomically(out, writer({"a.csv": "x"}))
    assert (out / "a.csv").read_text() == "x" and oct(out.stat().st_mode & 0o777) != "0o700"


def test_a_folder_of_other_files_is_refused_and_untouched(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    (out / "summary.json").mkdir()  # the case that gave "unexpected IsADirectoryError"
    with pytest.raises(ExportError, match="not an AttnScope export"):
        write_folder_atomically(out, writer({"a.csv": "x"}))
    assert (out / "thesis.tex").read_text() == "precious" and hidden(tmp_path) == []


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
        write_folder_atomically(target, writer({"a": "x"}))


@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "disk is full"), (errno.EACCES, "permission denied")])
def test_a_failing_writer_leaves_the_earlier_export_as_it_was(tmp_path, code, words):
    out = tmp_path / "out"
    write_folder_atomically(out, writer({"a.csv": "old", "summary.json": "{}"}))
    before = snapshot(out)

    def full_disk(folder):
        (folder / "a.csv").write_text("half")
        raise OSError(code, os.strerror(code))

    with pytest.raises(ExportError, match=words) as caught:
        write_folder_atomically(out, full_disk)
    assert "\n" not in str(caught.value) and "Errno" not in str(caught.value)
    assert snapshot(out) == before and hidden(tmp_path) == []


def test_an_interruption_between_files_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    write_folder_atomically(out, writer({"a.csv": "old"}))
    before = snapshot(out)
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 2:  # after the writer ran, before the swap
            raise Interrupted("interrupted (Ctrl+C)", 2)

    with pytest.raises(Interrupted):
        write_folder_atomically(out, writer({"b.csv": "new"}), check=check)
    assert snapshot(out) == before and hidden(tmp_path) == []


def test_a_failed_swap_puts_the_earlier_export_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_folder_atomically(out, writer({"a.csv": "old"}))
    before = snapshot(out)
    real_rename = os.rename
    renames = []

    def flaky(src, dst):
        renames.append((src, dst))
        if len(renames) == 2:  # old export aside worked; moving the new one in fails
            raise OSError(errno.EIO, "Input/output error")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", flaky)
    with pytest.raises(ExportError, match="input/output error"):
        write_folder_atomically(out, writer({"b.csv": "new"}))
    monkeypatch.undo()
    assert len(renames) == 3 and snapshot(out) == before and hidden(tmp_path) == []


def test_a_failed_export_removes_the_folders_it_created(tmp_path):
    def full_disk(folder):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ExportError, match="disk is full"):
        write_folder_atomically(tmp_path / "a" / "b" / "c", full_disk)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "a").mkdir()  # a folder that was there before stays
    with pytest.raises(ExportError):
        write_folder_atomically(tmp_path / "a" / "b" / "c", full_disk)
    assert [p.name for p in tmp_path.iterdir()] == ["a"] and list((tmp_path / "a").iterdir()) == []


def test_write_file_atomically(tmp_path):
    target = tmp_path / "fig.png"
    target.write_text("old")
    assert write_file_atomically(target, lambda p: p.write_text("new")) == target
    assert target.read_text() == "new"

    def fail(p):
        p.write_text("partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ExportError, match="disk is full"):
        write_file_atomically(target, fail)
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ExportError, match="is a folder"):
        write_file_atomically(tmp_path / "dir.csv", lambda p: p.write_text("x"))
    seen = []
    write_file_atomically(tmp_path / "new" / "x.svg", lambda p: seen.append(p.suffix) or p.write_text("<svg/>"))
    assert seen == [".svg"]  # the temporary file keeps the extension writers choose the format by


# ----------------------------------------------------------------------------- the user's own files
def test_an_export_holding_a_file_the_user_saved_there_is_refused_naming_it(tmp_path):
    out = tmp_path / "out"
    write_folder_atomically(out, writer(EXPORT))
    (out / "mine.txt").write_text("my notes")
    before = snapshot(out)
    with pytest.raises(ExportError) as caught:
        write_folder_atomically(out, writer({"scores.csv": "new"}))
    message = str(caught.value)
    assert f"{out} holds mine.txt, which AttnScope did not write" in message and "move it elsewhere" in message
    assert snapshot(out) == before and hidden(tmp_path) == []


def test_a_folder_of_the_users_inside_an_export_is_named_and_kept(tmp_path):
    out = tmp_path / "out"
    write_folder_atomically(out, writer(EXPORT))
    (out / "heads" / "keep").mkdir()
    (out / "heads" / "keep" / "draft.tex").write_text("precious")
    (out / "empty").mkdir()  # the marker lists AttnScope's folders: an empty one of the user's is theirs too
    with pytest.raises(ExportError, match=r"holds empty/, heads/keep/, which AttnScope did not write: an export "
                                          r"there would delete them"):
        check_export_target(out)
    assert (out / "heads" / "keep" / "draft.tex").read_text() == "precious"


def test_a_file_saved_while_the_export_is_written_is_kept_and_named(tmp_path):
    """The user saves a file after the target check, while the new export is being written: the swap
    looks again once the earlier export is moved aside, and puts it back whole."""
    out = tmp_path / "out"
    write_folder_atomically(out, writer(EXPORT))

    def write(folder):
        (folder / "scores.csv").write_text("new")
        (out / "mine.txt").write_text("saved meanwhile")

    with pytest.raises(ExportError, match="holds mine.txt, which AttnScope did not write"):
        write_folder_atomically(out, write)
    assert (out / "mine.txt").read_text() == "saved meanwhile" and (out / "scores.csv").read_text() == "csv"
    assert hidden(tmp_path) == []


def test_what_the_export_wrote_is_recorded_and_replaced_whole(tmp_path):
    out = tmp_path / "out"
    write_folder_atomically(out, writer(EXPORT))
    marker = json.loads((out / MARKER).read_text())
    assert marker == {"generator": "attnscope", "files": ["heads/L0H0.png", "scores.csv", "summary.json"],
                      "folders": ["heads"]}
    assert not_written_by_attnscope(out) == []
    write_folder_atomically(out, writer({"summary.json": "{}"}))
    assert set(snapshot(out)) == {"summary.json", MARKER}


def test_exports_of_earlier_versions_are_judged_as_before(tmp_path):
    """No marker (summary.json names AttnScope) or a marker without a folder list: replaced as before;
    an empty folder in the latter holds nothing to lose."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.json").write_text(json.dumps({"generator": "attnscope"}))
    (old / "grid.png").write_text("png")
    write_folder_atomically(old, writer({"summary.json": "{}"}))
    assert set(snapshot(old)) == {"summary.json", MARKER}
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / MARKER).write_text(json.dumps({"generator": "attnscope", "files": ["grid.png"]}))
    (listed / "grid.png").write_text("png")
    (listed / "heads").mkdir()
    assert not_written_by_attnscope(listed) == []
    (listed / "mine.txt").write_text("x")
    assert not_written_by_attnscope(listed) == ["mine.txt"]


def test_an_export_without_a_file_list_keeps_every_name_no_attnscope_version_writes(tmp_path):
    """No marker (an earlier version's export, or a marker the user deleted): only the names an export of any
    version writes are AttnScope's: the user's mine.txt and sub/ make the export refuse, the folder as it was."""
    old = tmp_path / "notes"
    old.mkdir()
    (old / "summary.json").write_text(json.dumps({"generator": "attnscope"}))
    for name in ("attention.npz", "scores.csv", "grid.svg", "heads/L0H0.png", "heads/L11H3.pdf"):
        (old / name).parent.mkdir(exist_ok=True)
        (old / name).write_text("x")
    assert not_written_by_attnscope(old) == []
    (old / "mine.txt").write_text("my notes")
    (old / "sub").mkdir()
    (old / "heads" / "L0H0.txt").write_text("mine too")
    before = snapshot(old)
    with pytest.raises(ExportError) as caught:
        write_folder_atomically(old, writer({"summary.json": "{}"}))
    assert f"{old} holds mine.txt, sub/, heads/L0H0.txt, which AttnScope did not write" in str(caught.value)
    assert snapshot(old) == before and hidden(tmp_path) == []

    deleted = tmp_path / "deleted"
    write_folder_atomically(deleted, writer(EXPORT))
    (deleted / MARKER).unlink()
    (deleted / "mine.txt").write_text("my notes")
    with pytest.raises(ExportError, match="holds mine.txt, which AttnScope did not write"):
        check_export_target(deleted)


# ----------------------------------------------------------------------------- what cannot be deleted
@contextmanager
def undeletable(folder: Path):
    """Files in ``folder`` that cannot be deleted: a read-only folder, or for root (whom permissions do
    not stop) the immutable attribute; skips where neither works. Undone where the folder is at the end:
    in its place, or in an earlier export moved aside (``.attnscope-old-*/export``)."""
    def places():
        return [p for p in (folder, *folder.parent.parent.glob(f".attnscope-old-*/export/{folder.name}")) if p.is_dir()]

    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            for place in places():
                place.chmod(0o755)
        return
    if subprocess.run(["chattr", "+i", str(folder / "L0H0.png")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i does not work here")
    try:
        yield
    finally:
        for place in places():
            subprocess.run(["chattr", "-i", str(place / "L0H0.png")], capture_output=True)


def test_an_earlier_export_that_cannot_be_deleted_is_named_in_a_warning(tmp_path):
    out = tmp_path / "out"
    write_folder_atomically(out, writer(EXPORT))
    with ExitStack() as stack:
        def write(folder):  # the earlier export's file becomes undeletable while the new one is written
            (folder / "summary.json").write_text("{}")
            stack.enter_context(undeletable(out / "heads"))

        written = write_folder_atomically(out, write)
        (left,) = hidden(tmp_path)
        assert left.startswith(".attnscope-old-out-")
        (warning,) = written.warnings
        assert f"The new export is in {out}, but the earlier one could not be deleted wholly" in warning
        assert str(tmp_path / left) in warning and "L0H0.png" in warning and "\n" not in warning
        assert set(snapshot(out)) == {"summary.json", MARKER}  # the new export is whole and in place
        again = write_folder_atomically(out, writer({"a.csv": "x"}))  # tries again, and says what stays
        assert again.warnings == (f"{tmp_path / left} is left from an earlier export to {out} and cannot be "
                                  f"deleted (permission denied): delete that folder yourself.",)
    assert write_folder_atomically(out, writer({"a.csv": "x"})).warnings == () and hidden(tmp_path) == []


@pytest.mark.slow
def test_the_command_line_warns_of_an_earlier_export_it_could_not_delete(tiny_model_dir, tmp_path, capsys):
    from helpers import run_main

    out = tmp_path / "out"
    code, _, err = run_main(capsys, "export", "--model", tiny_model_dir, "--text", "The cat sat.", "--out", out)
    assert code == 0, err
    with undeletable(out / "heads"):
        code, stdout, err = run_main(capsys, "export", "--model", tiny_model_dir, "--text", "A dog ran.", "--out", out)
        (left,) = hidden(tmp_path)
    # 18 files and the 13 figures' options beside them (grid.json, heads/L·H·.json)
    assert code == 0 and stdout.startswith(f"wrote 31 files to {out}")
    (line,) = err.splitlines()
    assert line.startswith(f"attnscope: warning: The new export is in {out}, but the earlier one could not be "
                           "deleted wholly") and str(tmp_path / left) in line
    assert json.loads((out / "summary.json").read_text())["text"] == "A dog ran."


@pytest.mark.slow
def test_an_export_onto_a_full_disk_names_the_folder_asked_for_in_one_line(tiny_model_dir, tmp_path, capfd,
                                                                          monkeypatch):
    """The figures go onto a full disk (/dev/full behind each image's name): one line naming --out, not the
    hidden staging folder, and no "libpng error: Write Error" from Qt."""
    import gui.plots.figure_make

    from helpers import run_main

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    real = gui.plots.figure_make.save_figure  # the export's figures are main.py figure's (write_figure)

    def onto_a_full_disk(fig, path, width_px=None):
        Path(path).symlink_to("/dev/full")
        return real(fig, path, width_px)

    monkeypatch.setattr(gui.plots.figure_make, "save_figure", onto_a_full_disk)
    out = tmp_path / "exports" / "run"
    code, stdout, err = run_main(capfd, "export", "--model", tiny_model_dir, "--text", "The cat sat.", "--out", out,
                                 "--no-head-images")
    assert code == 2 and stdout == "" and "libpng" not in err
    (line,) = err.splitlines()
    assert line == (f"attnscope: error: Cannot write the export to {out}: the disk is full (no space left on "
                    "device); nothing was changed there.")
    assert not (tmp_path / "exports").exists()


# ----------------------------------------------------------------------------- what a killed export left
def test_what_an_export_killed_midway_left_is_removed_by_the_next_export_to_that_folder(tmp_path):
    """kill -9 during an export left its staging folder (model-sized) and an earlier export moved aside, and
    nothing ever removed them. Nobody holds the lock: they are stale."""
    out = tmp_path / "out"
    staging = tmp_path / (_hidden_prefix("export", out) + "k1ll3d00")
    (staging / "heads").mkdir(parents=True)
    (staging / "attention.npz").write_bytes(b"\0" * 1000)
    aside = tmp_path / (_hidden_prefix("old", out) + "k1ll3d01")
    write_folder_atomically(aside / "export", writer(EXPORT))
    kept = tmp_path / (_hidden_prefix("old", out) + "k1ll3d02")
    write_folder_atomically(kept / "export", writer(EXPORT))
    (kept / "export" / "mine.txt").write_text("mine")
    other = tmp_path / (_hidden_prefix("export", tmp_path / "outer") + "l1ve0000")  # another folder's
    other.mkdir()
    written = write_folder_atomically(out, writer(EXPORT))
    assert hidden(tmp_path) == sorted([kept.name, other.name])
    assert written.warnings == (f"{kept} holds an earlier export of {out} with mine.txt, which AttnScope did not "
                                "write: it was kept; move what you want from it, then delete it.",)
    assert set(snapshot(out)) == {*EXPORT, MARKER}


@pytest.mark.slow
def test_a_staging_folder_of_an_export_killed_with_sigkill_is_removed_by_the_next_one(tmp_path):
    import signal
    import time

    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from analysis.export.folders import write_folder_atomically\n"
        "def write(folder):\n"
        "    (folder / 'attention.npz').write_bytes(b'0' * 100000)\n"
        "    time.sleep(600)\n"
        f"write_folder_atomically(Path({str(out)!r}), write)\n")], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60  # a guard against a child that never gets there, not a timing
        while not list(tmp_path.glob(".attnscope-export-out-*/attention.npz")) and time.monotonic() < deadline:
            assert child.poll() is None
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert [p.name.startswith(".attnscope-export-out-") for p in tmp_path.iterdir() if p.is_dir()] == [True]
    written = write_folder_atomically(out, writer(EXPORT))
    assert written.warnings == () and [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["out"]
