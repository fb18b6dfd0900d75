"""The app's lifecycle as a process: every early exit leaves Qt in order with exit code 2, Ctrl+C and SIGTERM
close it as its window's close does, and closing the window mid-run never aborts the process. Real
subprocesses of main.py (offscreen, private settings), so a crash at exit shows as a negative return code."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from helpers import one_error_line

pytestmark = pytest.mark.slow  # each test starts the app at least once (seconds)

#: main.main with the launch options given after -c; prints "shown" once a result is on screen and, with
#: ATTNSCOPE_TEST_SLOW set, makes the run's forward pass long and closes the window once it runs.
LAUNCH = """
import os, sys, time
sys.path.insert(0, {root!r})
from PySide6 import QtCore
from gui.chrome import window
import analysis.run.inference as inference

shown, started = window.MainWindow._analysis_ready, window.MainWindow._analysis_started

def ready(self, bundle):
    shown(self, bundle)
    print("shown", flush=True)

window.MainWindow._analysis_ready = ready
slow = os.environ.get("ATTNSCOPE_TEST_SLOW")
if slow:
    real = inference.forward_with_capture

    def long_forward(loaded, ids, **kwargs):
        import torch
        deadline = time.monotonic() + 120
        if slow == "modules":  # many forwards: torch module calls, one after another
            while time.monotonic() < deadline:
                real(loaded, ids, **kwargs)
        else:  # plain torch operations for ``slow`` ms, no module call in them: nothing can interrupt them
            a, until = torch.randn(400, 400), time.monotonic() + int(slow) / 1000
            while time.monotonic() < until:
                a = torch.tanh(a @ a)
        return real(loaded, ids, **kwargs)

    inference.forward_with_capture = long_forward

    def close_soon(self, request_id):
        started(self, request_id)
        print("running", flush=True)
        QtCore.QTimer.singleShot(300, self.close)

    window.MainWindow._analysis_started = close_soon
if os.environ.get("ATTNSCOPE_TEST_SIGNAL_IN_BUILD"):  # a Ctrl+C while the window is being built, in a slot
    import signal                                       # pyqtgraph's C++ signals call
    import pyqtgraph

    linked, sent = pyqtgraph.AxisItem.linkedViewChanged, []

    def interrupted(self, *args, **kwargs):
        if not sent:
            sent.append(os.kill(os.getpid(), signal.SIGINT))
        return linked(self, *args, **kwargs)

    pyqtgraph.AxisItem.linkedViewChanged = interrupted
import main
sys.exit(main.main(sys.argv[1:]))
""".format(root=str(ROOT))


def app_env(tmp_path, **extra) -> dict:
    return {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1",
            "XDG_CONFIG_HOME": str(tmp_path / "config"), **extra}  # settings in a private folder


def launch(tmp_path, *args, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", LAUNCH, *map(str, args)], cwd=ROOT, env=app_env(tmp_path, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)


def wait_for_line(app: subprocess.Popen, line: str, timeout: float = 240) -> None:
    """Read the app's output until ``line``; fails if the app ends or says nothing of it in ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([app.stdout], [], [], 1)
        if ready:
            got = app.stdout.readline()
            if got.strip() == line:
                return
            if not got:
                break
    app.kill()
    raise AssertionError(f"the app never said {line!r}: {app.communicate()[1][-2000:]}")


def ended(app: subprocess.Popen) -> tuple[int, str]:
    """The app's exit code and stderr, once it ends (it is killed after 120 s: a hang is a failure)."""
    try:
        _, err = app.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        app.kill()
        raise AssertionError(f"the app was still running 120 s later: {app.communicate()[1][-2000:]}") from None
    return app.returncode, err


@pytest.mark.parametrize("case", ["select out of range", "a model that is not there", "screenshots unwritable"])
def test_every_early_exit_leaves_qt_in_order_and_exits_2(tmp_path, case):
    """`--select 99.99 --screenshot D`, a missing model and an unwritable screenshot folder print their refusal
    and exit 2, with no SIGSEGV (PySide's exit handler must not be left to destroy the window's pyqtgraph items
    in no order) and no settings folder left behind."""
    (tmp_path / "a-file").write_text("not a folder")
    args = {"select out of range": ["--model", "bundled", "--select", "99.99", "--screenshot", tmp_path / "shots"],
            "a model that is not there": ["--model", tmp_path / "missing", "--screenshot", tmp_path / "shots"],
            "screenshots unwritable": ["--model", "bundled", "--screenshot", tmp_path / "a-file" / "shots"]}[case]
    says = {"select out of range": "--select L99H99: this model has layers 0–3",
            "a model that is not there": "not found",
            "screenshots unwritable": "cannot save the screenshots in"}[case]
    temp = tmp_path / "temp"
    temp.mkdir()
    code, err = ended(launch(tmp_path, "--text", "The cat sat", *args, TMPDIR=str(temp)))
    assert code == 2, err  # not -11 (SIGSEGV) nor 1
    assert says in one_error_line(err)
    assert not any(p.name.startswith("attnscope-screenshot-settings-") for p in temp.iterdir())  # none left behind


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_close_the_app_as_its_window_does(tmp_path, signum):
    """Started from a terminal, Ctrl+C or SIGTERM closes the window (its settings saved) and exits 128 + signal
    (Python's handler waits for Python code to run, and Qt's loop waits in C++, so the app must wake it)."""
    app = launch(tmp_path, "--model", "bundled", "--text", "The cat sat")
    wait_for_line(app, "shown")
    app.send_signal(signum)
    code, err = ended(app)
    assert code == 128 + signum, err
    assert "Traceback" not in err and "terminate called" not in err
    saved = list((tmp_path / "config").rglob("*.conf"))
    assert saved and "bundled" in saved[0].read_text()  # the window's close path ran: the model is remembered


def test_ctrl_c_while_the_window_is_built_ends_the_app_cleanly(tmp_path):
    """A Ctrl+C in the seconds the window takes to build raises no KeyboardInterrupt inside the half-built window
    or a pyqtgraph slot (a SIGSEGV at exit, or a traceback and an app that runs on): the handler is there before
    the window, the build finishes, the loop never runs, the app leaves in order with 130."""
    code, err = ended(launch(tmp_path, "--model", "bundled", "--text", "The cat sat",
                             ATTNSCOPE_TEST_SIGNAL_IN_BUILD="1"))
    assert code == 130, err
    assert err == "", err  # no traceback from the slot, no Qt warning


@pytest.mark.parametrize("forward", ["modules", "modules", "modules", "3000"])
def test_closing_the_window_mid_run_exits_0_without_an_abort(tmp_path, forward):
    """Closing the window during a long run exits 0, never "terminate called without an active exception" (the
    worker thread inside torch when Python finalises): the run is interrupted at its next module call, or, for a
    step that cannot be (``3000``: 3 s of plain torch operations; the window closes 0.3 s after the run starts),
    waited for, before Qt and Python go away."""
    app = launch(tmp_path, "--model", "bundled", "--text", "The cat sat on the mat. " * 20, ATTNSCOPE_TEST_SLOW=forward)
    wait_for_line(app, "running")
    code, err = ended(app)
    assert code == 0, err
    assert "terminate called" not in err and "Traceback" not in err
