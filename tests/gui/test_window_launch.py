"""Launching and closing the window: the first focus, settings that persist, closing mid-load or mid-run,
the --screenshot launch option, a remembered model that is gone, and the default model."""
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtGui  # noqa: E402

from conftest import ROOT  # noqa: E402
from helpers import make_window, run  # noqa: E402


@pytest.mark.slow
def test_focus_starts_in_the_text_box_and_tab_leaves_it(qtbot, settings, tiny_model_dir):
    w = make_window(qtbot, settings, tiny_model_dir)
    w.activateWindow()
    box = w.text_input.text_edit
    qtbot.waitUntil(box.hasFocus, timeout=5000)
    box.setPlainText("a b")
    qtbot.keyClick(box, QtCore.Qt.Key.Key_Tab)
    assert "\t" not in box.toPlainText() and not box.hasFocus()
    w.grid_panel.plot.setFocus()
    qtbot.waitUntil(w.grid_panel.plot.hasFocus)
    assert "#3d8ee0" in w.grid_panel.plot.styleSheet()  # the focus ring
    qtbot.keyClick(w.grid_panel.plot, QtCore.Qt.Key.Key_L, QtCore.Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(box.hasFocus)
    assert "transparent" in w.grid_panel.plot.styleSheet()
    w.close()


@pytest.mark.slow
def test_settings_persist(qtbot, settings, tiny_model_dir):
    from gui.chrome.window import MainWindow

    w = make_window(qtbot, settings, tiny_model_dir)
    w.state.set_colormap("magma")
    w.state.set_scale("log")
    run(qtbot, w, "remember me")
    w.text_input.text_edit.setPlainText("typed after, never run explicitly")
    w.close()
    w2 = MainWindow(settings)
    qtbot.addWidget(w2)
    assert w2.state.colormap == "magma" and w2.state.scale == "log"
    assert w2.head_tab.colormap_choice.currentData() == "magma"
    assert w2.text_input.recent_texts()[0] == "remember me"
    assert w2.text_input.last_text() == "typed after, never run explicitly"  # what the box held at the close
    assert settings.value("model/last") == str(tiny_model_dir)
    w2.close()


@pytest.mark.slow
def test_closing_mid_load_or_mid_run_returns_at_once(qtbot, settings, tiny_model_dir):
    from gui.chrome.window import MainWindow

    w = MainWindow(settings)
    qtbot.addWidget(w)
    w.show()
    w.load_model(str(tiny_model_dir))
    started = time.perf_counter()
    w.close()
    assert time.perf_counter() - started < 0.5
    w2 = make_window(qtbot, settings, tiny_model_dir)
    w2.set_text("word " * 60)
    w2.run_text()
    started = time.perf_counter()
    w2.close()
    assert time.perf_counter() - started < 0.5


@pytest.mark.slow
def test_screenshot_mode_in_process(qtbot, tiny_model_dir, tmp_path, monkeypatch):
    """run_app --screenshot: every view saved, --select L2H1 applied, the user's settings untouched."""
    import argparse

    from gui import app as app_module

    used = []
    real = app_module.screenshot_settings
    monkeypatch.setattr(app_module, "screenshot_settings", lambda: used.append(real()) or used[-1])
    args = argparse.Namespace(model=str(tiny_model_dir), device="cpu", text="The cat sat on the mat",
                              select="L2H1", screenshot=tmp_path / "shots")  # as the app names heads
    assert app_module.run_app(args) == 0
    for name in ("window", "grid", "detail", "scores"):
        image = QtGui.QImage(str(tmp_path / "shots" / f"{name}.png"))
        assert not image.isNull() and image.width() > 200
    assert len(used) == 1 and "attnscope-screenshot-settings" in used[0].fileName()
    started = time.monotonic()
    qtbot.wait(300)  # the app ended itself cleanly: later event loops of this process still run
    assert time.monotonic() - started >= 0.25


def screenshot_run(*args, config_home=None):
    import tempfile

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",  # settings go to a private folder, not the user's
           "XDG_CONFIG_HOME": str(config_home or tempfile.mkdtemp(prefix="attnscope-config-"))}
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


@pytest.mark.slow
def test_screenshot_launch_option_never_writes_the_users_settings(tiny_model_dir, tmp_path):
    out = screenshot_run("--model", tiny_model_dir, "--text", "The cat sat on the mat", "--select", "2.1",
                         "--screenshot", tmp_path / "shots", config_home=tmp_path / "cfg")
    assert out.returncode == 0, out.stderr
    for name in ("window", "grid", "detail", "scores"):
        image = QtGui.QImage(str(tmp_path / "shots" / f"{name}.png"))
        assert not image.isNull() and image.width() > 200
    assert not any((tmp_path / "cfg").rglob("*.conf")) and not any((tmp_path / "cfg").rglob("*.ini"))


@pytest.mark.slow
def test_select_out_of_range_fails_the_screenshot_run(tiny_model_dir, tmp_path):
    out = screenshot_run("--model", tiny_model_dir, "--select", "99.99", "--screenshot", tmp_path / "shots")
    assert out.returncode != 0 and "--select L99H99" in out.stderr


def test_a_remembered_model_that_is_gone_falls_back_to_the_default(tiny_model_dir, tmp_path, settings):
    import shutil as sh

    from gui.app import choose_source, still_available

    folder = sh.copytree(tiny_model_dir, tmp_path / "was-here")
    settings.setValue("model/last", str(folder))
    assert choose_source(None, settings) == (str(folder), False)
    sh.rmtree(folder)
    assert not still_available(str(folder)) and still_available("bundled") and not still_available("gpt2-xl")
    assert choose_source(None, settings)[0] in ("bundled", "smollm2", "gpt2")  # the default instead of failing
    assert choose_source("gpt2-xl", settings) == ("gpt2-xl", False)  # asked for by name: loading will say


@pytest.mark.slow
def test_screenshot_fails_loudly_on_a_bad_model(tmp_path):
    out = screenshot_run("--model", tmp_path / "nope", "--screenshot", tmp_path / "shots")
    assert out.returncode != 0 and "not found" in out.stderr


@pytest.mark.slow
def test_default_model_is_not_gpt2_without_a_cached_gpt2(tmp_path):
    """A fresh HF_HOME: SmolLM2 when its package is installed, else bundled; the GPT-2 note either way."""
    from analysis.model.catalogue import smollm2_file

    out = subprocess.run([sys.executable, "-c", "from gui.app import default_model_choice as d; print(d())"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    expected = "('smollm2', True)" if smollm2_file() is not None else "('bundled', True)"
    assert out.stdout.strip() == expected, out.stderr


@pytest.mark.parametrize("gpt2, smollm2, expected", [(True, True, ("gpt2", False)), (False, True, ("smollm2", True)),
                                                     (False, False, ("bundled", True))])
def test_the_default_model_is_gpt2_then_smollm2_then_bundled(monkeypatch, tmp_path, gpt2, smollm2, expected):
    from analysis.model import catalogue, hub
    from gui.app import default_model_choice

    monkeypatch.setattr(hub, "is_cached", lambda name: gpt2 and name == "gpt2")
    monkeypatch.setattr(catalogue, "smollm2_file", lambda: tmp_path / "x.gguf" if smollm2 else None)
    assert default_model_choice() == expected
