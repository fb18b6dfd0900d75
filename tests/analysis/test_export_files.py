"""Export folders never destroy what AttnScope did not write (issue 17: items 2, 13, 18, 19, 21b, 21c).

Before: a user's own file saved in an earlier export was deleted with it; two processes exporting to one
folder left whole earlier exports hidden beside it and printed false messages; an undeletable file left a
hidden copy of the earlier export with no word; a full disk named the hidden staging folder and printed
libpng's own "Write Error" line; a dangling link was "a file, not a folder"; an output could be an input.
"""
import errno
import json
import os
import subprocess
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from analysis.export import writers as ex
from analysis.errors import ExportError
from helpers import folder_files as snapshot, folder_writer as writer, hidden_leftovers as hidden

ROOT = Path(__file__).resolve().parents[2]




EXPORT = {"summary.json": '{"generator": "attnscope"}', "heads/L0H0.png": "png", "scores.csv": "csv"}


# ----------------------------------------------------------------------------- 18: the user's own files
def test_an_export_holding_a_file_the_user_saved_there_is_refused_naming_it(tmp_path):
    out = tmp_path / "out"
    ex.write_folder_atomically(out, writer(EXPORT))
    (out / "mine.txt").write_text("my notes")
    before = snapshot(out)
    with pytest.raises(ExportError) as caught:
        ex.write_folder_atomically(out, writer({"scores.csv": "new"}))
    message = str(caught.value)
    assert f"{out} holds mine.txt, which AttnScope did not write" in message and "move it elsewhere" in message
    assert snapshot(out) == before and hidden(tmp_path) == []


def test_a_folder_of_the_users_inside_an_export_is_named_and_kept(tmp_path):
    out = tmp_path / "out"
    ex.write_folder_atomically(out, writer(EXPORT))
    (out / "heads" / "keep").mkdir()
    (out / "heads" / "keep" / "draft.tex").write_text("precious")
    (out / "empty").mkdir()  # the marker lists AttnScope's folders: an empty one of the user's is theirs too
    with pytest.raises(ExportError, match=r"holds empty/, heads/keep/, which AttnScope did not write: an export "
                                          r"there would delete them"):
        ex.check_export_target(out)
    assert (out / "heads" / "keep" / "draft.tex").read_text() == "precious"


def test_a_file_saved_while_the_export_is_written_is_kept_and_named(tmp_path):
    """The user saves a file after the target check, while the new export is being written: the swap
    looks again once the earlier export is moved aside, and puts it back whole."""
    out = tmp_path / "out"
    ex.write_folder_atomically(out, writer(EXPORT))

    def write(folder):
        (folder / "scores.csv").write_text("new")
        (out / "mine.txt").write_text("saved meanwhile")

    with pytest.raises(ExportError, match="holds mine.txt, which AttnScope did not write"):
        ex.write_folder_atomically(out, write)
    assert (out / "mine.txt").read_text() == "saved meanwhile" and (out / "scores.csv").read_text() == "csv"
    assert hidden(tmp_path) == []


def test_what_the_export_wrote_is_recorded_and_replaced_whole(tmp_path):
    out = tmp_path / "out"
    ex.write_folder_atomically(out, writer(EXPORT))
    marker = json.loads((out / ex.MARKER).read_text())
    assert marker == {"generator": "attnscope", "files": ["heads/L0H0.png", "scores.csv", "summary.json"],
                      "folders": ["heads"]}
    assert ex.not_written_by_attnscope(out) == []
    ex.write_folder_atomically(out, writer({"summary.json": "{}"}))
    assert set(snapshot(out)) == {"summary.json", ex.MARKER}


def test_exports_of_earlier_versions_are_judged_as_before(tmp_path):
    """No marker (summary.json names AttnScope) or a marker without a folder list: replaced as before;
    an empty folder in the latter holds nothing to lose."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.json").write_text(json.dumps({"generator": "attnscope"}))
    (old / "grid.png").write_text("png")
    ex.write_folder_atomically(old, writer({"summary.json": "{}"}))
    assert set(snapshot(old)) == {"summary.json", ex.MARKER}
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / ex.MARKER).write_text(json.dumps({"generator": "attnscope", "files": ["grid.png"]}))
    (listed / "grid.png").write_text("png")
    (listed / "heads").mkdir()
    assert ex.not_written_by_attnscope(listed) == []
    (listed / "mine.txt").write_text("x")
    assert ex.not_written_by_attnscope(listed) == ["mine.txt"]


def test_an_export_without_a_file_list_keeps_every_name_no_attnscope_version_writes(tmp_path):
    """No marker (an earlier version's export, or a marker the user deleted): only the names an export of any
    version writes are AttnScope's; the user's mine.txt and sub/ were deleted with the rest (issue 17 item 18)."""
    old = tmp_path / "notes"
    old.mkdir()
    (old / "summary.json").write_text(json.dumps({"generator": "attnscope"}))
    for name in ("attention.npz", "scores.csv", "grid.svg", "heads/L0H0.png", "heads/L11H3.pdf"):
        (old / name).parent.mkdir(exist_ok=True)
        (old / name).write_text("x")
    assert ex.not_written_by_attnscope(old) == []
    (old / "mine.txt").write_text("my notes")
    (old / "sub").mkdir()
    (old / "heads" / "L0H0.txt").write_text("mine too")
    before = snapshot(old)
    with pytest.raises(ExportError) as caught:
        ex.write_folder_atomically(old, writer({"summary.json": "{}"}))
    assert f"{old} holds mine.txt, sub/, heads/L0H0.txt, which AttnScope did not write" in str(caught.value)
    assert snapshot(old) == before and hidden(tmp_path) == []

    deleted = tmp_path / "deleted"
    ex.write_folder_atomically(deleted, writer(EXPORT))
    (deleted / ex.MARKER).unlink()
    (deleted / "mine.txt").write_text("my notes")
    with pytest.raises(ExportError, match="holds mine.txt, which AttnScope did not write"):
        ex.check_export_target(deleted)


# ----------------------------------------------------------------------------- 19: what cannot be deleted
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
    ex.write_folder_atomically(out, writer(EXPORT))
    with ExitStack() as stack:
        def write(folder):  # the earlier export's file becomes undeletable while the new one is written
            (folder / "summary.json").write_text("{}")
            stack.enter_context(undeletable(out / "heads"))

        written = ex.write_folder_atomically(out, write)
        (left,) = hidden(tmp_path)
        assert left.startswith(".attnscope-old-out-")
        (warning,) = written.warnings
        assert f"The new export is in {out}, but the earlier one could not be deleted wholly" in warning
        assert str(tmp_path / left) in warning and "L0H0.png" in warning and "\n" not in warning
        assert set(snapshot(out)) == {"summary.json", ex.MARKER}  # the new export is whole and in place
        again = ex.write_folder_atomically(out, writer({"a.csv": "x"}))  # tries again, and says what stays
        assert again.warnings == (f"{tmp_path / left} is left from an earlier export to {out} and cannot be "
                                  f"deleted (permission denied): delete that folder yourself.",)
    assert ex.write_folder_atomically(out, writer({"a.csv": "x"})).warnings == () and hidden(tmp_path) == []


# ----------------------------------------------------------------------------- 13: two processes, one folder
CONCURRENT = r"""
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from analysis.export.writers import write_folder_atomically
from analysis.errors import ExportError

out, who, times, go = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
Path(str(go) + "." + who).touch()
while not go.exists():
    time.sleep(0.001)
for i in range(times):
    token = f"{who}-{i}"

    def write(folder):  # under the lock: what is in out now must be one whole export, or nothing
        if out.exists():
            found = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()}
            marker = json.loads(found.pop(".attnscope-export.json"))
            tokens = set(found.values())
            ok = len(tokens) == 1 and sorted(found) == marker["files"] == ["a.csv", "heads/L0H0.png", "summary.json"]
            print("saw", tokens.pop() if ok else f"BROKEN {sorted(found)}", flush=True)
        else:
            print("saw none", flush=True)
        (folder / "heads").mkdir()
        for name in ("a.csv", "heads/L0H0.png", "summary.json"):
            (folder / name).write_text(token)

    try:
        written = write_folder_atomically(out, write)
        print("wrote", token, len(written), flush=True)
    except ExportError as exc:
        print("error", token, exc, flush=True)
"""


@pytest.mark.slow
def test_processes_exporting_to_one_folder_take_turns(tmp_path):
    """Three real processes, 60 exports each, to one folder: every export is one whole export that the
    next one replaced whole (each export but the last was seen complete, exactly once, by the next one),
    every message is 'wrote', and nothing hidden is left behind."""
    parent, go = tmp_path / "exports", tmp_path / "go"
    parent.mkdir()
    out, times, names = parent / "run", 60, ("p0", "p1", "p2")
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(ROOT), str(out), who, str(times), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in names]
    while not all(Path(f"{go}.{who}").exists() for who in names):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
    go.touch()
    lines = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0 and stderr == "", stderr
        lines += stdout.splitlines()
    wrote = [line.split()[1] for line in lines if line.startswith("wrote ")]
    seen = [line.split(" ", 1)[1] for line in lines if line.startswith("saw ")]
    assert [line for line in lines if not line.startswith(("wrote ", "saw "))] == []
    assert len(wrote) == 3 * times and all(line.endswith(" 3") for line in lines if line.startswith("wrote "))
    final = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file()}
    marker = json.loads(final.pop(ex.MARKER))
    assert sorted(final) == marker["files"] == ["a.csv", "heads/L0H0.png", "summary.json"]
    (last,) = set(final.values())  # one whole export, the last one written
    # the swaps form one chain: the first export saw nothing, each later one saw the previous one whole
    assert sorted(seen) == sorted(["none"] + [token for token in wrote if token != last])
    assert sorted(p.name for p in parent.iterdir()) == ["run"]


def test_an_export_waiting_for_the_lock_can_be_stopped(tmp_path):
    """While another export holds the folder, ``check()`` runs: Ctrl+C stops the wait, leaving nothing."""
    from analysis.errors import Interrupted

    out = tmp_path / "out"
    calls = []

    def check():
        calls.append(1)
        if len(calls) > 3:
            raise Interrupted("interrupted (Ctrl+C)", 2)

    with ex._export_lock(out, None, []):
        with pytest.raises(Interrupted):
            ex.write_folder_atomically(out, writer({"a.csv": "x"}), check=check)
    assert len(calls) > 3 and sorted(p.name for p in tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- 21b, 21c: true messages
@pytest.fixture
def head_figure(tiny_result):
    from gui.plots.figures import dispose_figure, offscreen_head_figure
    from gui.qt import ensure_qapp

    ensure_qapp()
    fig = offscreen_head_figure(tiny_result, 0, 0)
    yield fig
    dispose_figure(fig)


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_a_figure_onto_a_full_disk_raises_the_disks_own_error_and_libpng_says_nothing(head_figure, tmp_path, capfd,
                                                                                      fmt):
    """/dev/full is a disk that is always full. Qt wrote the files itself: libpng printed "libpng error: Write
    Error" on stderr and the error gave no reason, under the path of what was often a hidden staging file."""
    from gui.export.figure_files import save_figure

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    target = tmp_path / f"head.{fmt}"
    target.symlink_to("/dev/full")  # writing there is writing onto a full disk
    with pytest.raises(OSError) as caught:
        save_figure(head_figure, target)
    assert caught.value.errno == errno.ENOSPC
    assert "libpng" not in capfd.readouterr().err
    ok = save_figure(head_figure, tmp_path / f"fine.{fmt}")
    assert ok.stat().st_size > 0


def test_a_link_to_nothing_as_the_export_folder_says_so(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(ExportError) as caught:
        ex.check_export_target(link)
    assert str(caught.value) == (f"{link} is a link to {tmp_path / 'gone'}, which does not exist: give a folder, "
                                 "or create the one the link points to.")
    assert "a file, not a folder" not in str(caught.value)


# ----------------------------------------------------------------------------- 7b: names too long, in the analysis
@pytest.mark.parametrize("check", [ex.check_export_target, ex.check_file_target])
def test_a_name_too_long_for_the_file_system_is_a_sentence(tmp_path, check):
    with pytest.raises(ExportError, match=r"a name in it is 300 bytes long \('a{24}…'\); the file system allows "
                                          r"at most 255 bytes per name"):
        check(tmp_path / ("a" * 300) / "x")
    with pytest.raises(ExportError, match=r"bytes long as a full path; the file system allows at most 4,095 bytes"):
        check(tmp_path.joinpath(*["d" * 200] * 25))
    assert ex.path_problem(tmp_path / ("é" * 127)) is None and "256 bytes" in ex.path_problem("é" * 128)


# ----------------------------------------------------------------------------- 2: outputs apart from inputs
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
            ex.check_outputs_apart(inputs, [output])
        assert words in str(caught.value), output
    for output in [("--json", "in/new.json", "file"), ("--out", "model/exports", "folder"), ("--out", "new", "folder")]:
        ex.check_outputs_apart(inputs, [output])  # beside or inside an input: nothing of it is lost
    (tmp_path / "old").mkdir()
    os.link(notes, tmp_path / "old" / "copy.txt")
    with pytest.raises(ExportError, match=r"--out old holds copy.txt, the same file as --text-file in/notes.txt "
                                          r"\(a hard link\)"):
        ex.check_outputs_apart(inputs, [("--out", "old", "folder")])


# ----------------------------------------------------------------------------- the command line says it all
@pytest.mark.slow
def test_the_command_line_warns_of_an_earlier_export_it_could_not_delete(tiny_model_dir, tmp_path, capsys):
    from helpers import run_main

    out = tmp_path / "out"
    code, _, err = run_main(capsys, "export", "--model", tiny_model_dir, "--text", "The cat sat.", "--out", out)
    assert code == 0, err
    with undeletable(out / "heads"):
        code, stdout, err = run_main(capsys, "export", "--model", tiny_model_dir, "--text", "A dog ran.", "--out", out)
        (left,) = hidden(tmp_path)
    assert code == 0 and stdout.startswith(f"wrote 18 files to {out}")
    (line,) = err.splitlines()
    assert line.startswith(f"attnscope: warning: The new export is in {out}, but the earlier one could not be "
                           "deleted wholly") and str(tmp_path / left) in line
    assert json.loads((out / "summary.json").read_text())["text"] == "A dog ran."


@pytest.mark.slow
def test_an_export_onto_a_full_disk_names_the_folder_asked_for_in_one_line(tiny_model_dir, tmp_path, capfd,
                                                                          monkeypatch):
    """The figures go onto a full disk (/dev/full behind each image's name): one line naming --out, not the
    hidden staging folder, and no "libpng error: Write Error" from Qt."""
    import gui.plots.figures

    from helpers import run_main

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    real = gui.plots.figures.save_figure

    def onto_a_full_disk(fig, path, width_px=None):
        Path(path).symlink_to("/dev/full")
        return real(fig, path, width_px)

    monkeypatch.setattr(gui.plots.figures, "save_figure", onto_a_full_disk)
    out = tmp_path / "exports" / "run"
    code, stdout, err = run_main(capfd, "export", "--model", tiny_model_dir, "--text", "The cat sat.", "--out", out,
                                 "--no-head-images")
    assert code == 2 and stdout == "" and "libpng" not in err
    (line,) = err.splitlines()
    assert line == (f"attnscope: error: Cannot write the export to {out}: the disk is full (no space left on "
                    "device); nothing was changed there.")
    assert not (tmp_path / "exports").exists()


# ----------------------------------------------------------------------------- one resolution of a target
def test_an_export_goes_where_the_kernel_resolves_the_path_that_was_checked(tmp_path, monkeypatch):
    """``--out lnk/../o5`` with lnk → deep/x: abspath made it ./o5 (and replaced the export read from there)
    while the outputs-vs-inputs check resolved it as the kernel does, deep/o5."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep" / "x").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to("deep/x")
    ex.write_folder_atomically(tmp_path / "o5", writer(EXPORT))
    before = snapshot(tmp_path / "o5")
    ex.check_outputs_apart([("--text-file o5/summary.json", "o5/summary.json")], [("--out", "lnk/../o5", "folder")])
    assert ex.check_export_target(Path("lnk/../o5")) == tmp_path / "deep" / "o5"
    ex.write_folder_atomically(Path("lnk/../o5"), writer({"summary.json": "{}"}))
    assert snapshot(tmp_path / "o5") == before and (tmp_path / "deep" / "o5" / "summary.json").read_text() == "{}"
    assert ex.check_file_target(Path("lnk/../a.json")) == tmp_path / "deep" / "a.json"


def test_the_current_folder_reached_through_a_linked_parent_is_refused(tmp_path, monkeypatch):
    (tmp_path / "cw" / "x").mkdir(parents=True)
    (tmp_path / "cwl").symlink_to("cw")
    monkeypatch.chdir(tmp_path / "cw" / "x")
    with pytest.raises(ExportError, match="is the current folder or holds it"):
        ex.check_export_target(tmp_path / "cwl" / "x")
    with pytest.raises(ExportError, match="is the current folder or holds it"):
        ex.check_export_target(tmp_path / "cwl")


@pytest.mark.parametrize("check", [ex.check_export_target, ex.check_file_target])
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
        ex.check_export_target(tmp_path / "full")


# ----------------------------------------------------------------------------- the lock file's name taken
@contextmanager
def no_hang(seconds=20):
    """A guard, not a timing: a wait that never ends (a blocking open of a named pipe) fails the test."""
    import signal

    def stop(signum, frame):
        raise AssertionError("the export hung")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("make, words", [
    (os.mkfifo, "is a named pipe, not a lock file"),
    (os.mkdir, "is a folder, not a lock file"),
    (lambda path: os.symlink("elsewhere", path), "is a link to nothing, not a lock file"),
    (lambda path: os.symlink("/dev/null", path), "is a link to a device (/dev/null), not a lock file"),
])
def test_something_else_at_the_lock_files_name_is_refused_naming_it(tmp_path, make, words):
    """A named pipe there hung the export forever (a blocking open, deaf to Ctrl+C); a folder was "a folder is
    in the way" without naming it; a link was followed (O_CREAT created its target)."""
    out = tmp_path / "o6"
    lock = ex.lock_path(out)
    make(lock)
    with no_hang(), pytest.raises(ExportError) as caught:
        ex.write_folder_atomically(out, writer(EXPORT))
    assert f"Cannot export to {out}: {lock}, where AttnScope keeps the lock of exports there, {words}" \
           in str(caught.value)
    assert not out.exists() and not (tmp_path / "elsewhere").exists()
    assert hidden(tmp_path) == [lock.name]


# ----------------------------------------------------------------------------- what a killed export left
def test_what_an_export_killed_midway_left_is_removed_by_the_next_export_to_that_folder(tmp_path):
    """kill -9 during an export left its staging folder (model-sized) and an earlier export moved aside, and
    nothing ever removed them. Nobody holds the lock: they are stale."""
    out = tmp_path / "out"
    staging = tmp_path / (ex._hidden_prefix("export", out) + "k1ll3d00")
    (staging / "heads").mkdir(parents=True)
    (staging / "attention.npz").write_bytes(b"\0" * 1000)
    aside = tmp_path / (ex._hidden_prefix("old", out) + "k1ll3d01")
    ex.write_folder_atomically(aside / "export", writer(EXPORT))
    kept = tmp_path / (ex._hidden_prefix("old", out) + "k1ll3d02")
    ex.write_folder_atomically(kept / "export", writer(EXPORT))
    (kept / "export" / "mine.txt").write_text("mine")
    other = tmp_path / (ex._hidden_prefix("export", tmp_path / "outer") + "l1ve0000")  # another folder's
    other.mkdir()
    written = ex.write_folder_atomically(out, writer(EXPORT))
    assert hidden(tmp_path) == sorted([kept.name, other.name])
    assert written.warnings == (f"{kept} holds an earlier export of {out} with mine.txt, which AttnScope did not "
                                "write: it was kept; move what you want from it, then delete it.",)
    assert set(snapshot(out)) == {*EXPORT, ex.MARKER}


@pytest.mark.slow
def test_a_staging_folder_of_an_export_killed_with_sigkill_is_removed_by_the_next_one(tmp_path):
    import signal
    import time

    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from analysis.export import writers as ex\n"
        "def write(folder):\n"
        "    (folder / 'attention.npz').write_bytes(b'0' * 100000)\n"
        "    time.sleep(600)\n"
        f"ex.write_folder_atomically(Path({str(out)!r}), write)\n")], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60  # a guard against a child that never gets there, not a timing
        while not list(tmp_path.glob(".attnscope-export-out-*/attention.npz")) and time.monotonic() < deadline:
            assert child.poll() is None
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert [p.name.startswith(".attnscope-export-out-") for p in tmp_path.iterdir() if p.is_dir()] == [True]
    written = ex.write_folder_atomically(out, writer(EXPORT))
    assert written.warnings == () and [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["out"]


def test_summary_carries_the_text(tiny_result):
    from analysis.export.writers import summary

    assert summary(tiny_result)["text"] == tiny_result.text
