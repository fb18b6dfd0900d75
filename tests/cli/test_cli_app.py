"""The app's launch (``cli.app``): a display that cannot open a window is found before Qt starts, and the
user is told what to do instead."""
import os
import sys

import pytest

from cli.app import display_problem
from helpers import one_error_line, run_main as run


@pytest.mark.parametrize("env,problem", [
    ({}, "no display found"),
    ({"DISPLAY": ":99"}, "cannot connect to the X display :99"),
    ({"DISPLAY": "nonsense"}, "not a display name"),
    ({"QT_QPA_PLATFORM": "offscreen"}, None),
    ({"WAYLAND_DISPLAY": "wayland-0"}, None),
])
def test_display_problems_are_found_before_qt_starts(env, problem, monkeypatch, tmp_path):
    if "DISPLAY" in env and env["DISPLAY"] == ":99" and os.path.exists("/tmp/.X11-unix/X99"):
        pytest.skip("an X server runs on :99 here")
    found = display_problem(env, "linux")
    assert (found is None) if problem is None else (problem in found)
    assert display_problem({}, "darwin") is None


def test_gui_without_a_display_says_what_to_do(capsys, monkeypatch):
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    code, _, err = run(capsys)
    assert code == 2 and "xvfb-run" in one_error_line(err)
