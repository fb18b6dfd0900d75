"""Exports to one folder take turns: three processes exporting to one folder each see the previous export
whole; a wait for the lock can be stopped; something else at the lock file's name is refused, naming it."""
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from analysis.errors import ExportError
from analysis.export.folders import write_folder_atomically
from analysis.export.lock import _export_lock, lock_path
from analysis.export.names import MARKER
from helpers import folder_writer as writer, hidden_leftovers as hidden

ROOT = Path(__file__).resolve().parents[2]
EXPORT = {"summary.json": '{"generator": "attnscope"}', "heads/L0H0.png": "png", "scores.csv": "csv"}


# ----------------------------------------------------------------------------- two processes, one folder
CONCURRENT = r"""
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from analysis.export.folders import write_folder_atomically
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
    marker = json.loads(final.pop(MARKER))
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

    with _export_lock(out, None, []):
        with pytest.raises(Interrupted):
            write_folder_atomically(out, writer({"a.csv": "x"}), check=check)
    assert len(calls) > 3 and sorted(p.name for p in tmp_path.iterdir()) == []


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
    lock = lock_path(out)
    make(lock)
    with no_hang(), pytest.raises(ExportError) as caught:
        write_folder_atomically(out, writer(EXPORT))
    assert f"Cannot export to {out}: {lock}, where AttnScope keeps the lock of exports there, {words}" \
           in str(caught.value)
    assert not out.exists() and not (tmp_path / "elsewhere").exists()
    assert hidden(tmp_path) == [lock.name]
