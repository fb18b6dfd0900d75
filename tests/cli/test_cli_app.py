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


def test_a_launch_text_file_that_cannot_be_read_is_one_line_before_any_window(capsys, monkeypatch, tmp_path):
    """main.py --text-file: a folder, a missing file, or --text beside it is refused in one line, before the
    display is even looked at (no window opens for a text that cannot run)."""
    monkeypatch.setattr("cli.app.display_problem", lambda: pytest.fail("the display was checked first"))
    for path, said in ((tmp_path, "is a folder"), (tmp_path / "missing.txt", "Cannot read")):
        code, _, err = run(capsys, "--text-file", str(path))
        assert code == 2 and said in one_error_line(err)
    code, _, err = run(capsys, "--text", "a", "--text-file", str(tmp_path))
    assert code == 2 and "not allowed with argument --text" in one_error_line(err)


def test_a_launch_text_file_becomes_the_launch_text(monkeypatch, tmp_path):
    """The file's text reaches the app as --text would (the app itself is replaced here: no window)."""
    import cli.app
    import gui.app

    (tmp_path / "t.txt").write_text("When Mary and John went to the store", encoding="utf-8")
    seen = []
    monkeypatch.setattr(cli.app, "display_problem", lambda: None)
    monkeypatch.setattr(gui.app, "run_app", lambda args: seen.append((args.text, args.max_tokens)) or 0)
    monkeypatch.setattr(gui.app, "shut_down_qt", lambda: None)
    from cli.parser import parse_args

    assert cli.app.cmd_gui(parse_args(["--text-file", str(tmp_path / "t.txt"), "--max-tokens", "8192"])) == 0
    assert seen == [("When Mary and John went to the store", 8192)]
