"""Starting the app: which model to open, launch options, and the --screenshot mode."""
from __future__ import annotations

import sys
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from .qt import ensure_qapp

SCREENSHOT_TIMEOUT_MS = 300_000
SCRATCH_WAIT_MS = 60_000
DEFAULT_TEXT = "The server rejected the request because it was overloaded."


def default_model_choice() -> tuple[str, bool]:
    """(source, gpt2_missing): GPT-2 when it is in the local cache (no network is touched), else bundled."""
    from analysis.loading import BUNDLED, is_cached

    if is_cached("gpt2"):
        return "gpt2", False
    return BUNDLED, True


def still_available(source: str) -> bool:
    """A remembered model is reopened only if it can be without the network (a folder that still exists,
    the bundled model, or a hub model in the cache); otherwise the app starts on the default."""
    from analysis.errors import ModelLoadError
    from analysis.loading import is_cached, resolve_source

    try:
        src = resolve_source(source)
    except ModelLoadError:
        return False
    return src.kind != "hub" or is_cached(source)


def choose_source(asked: str | None, settings: QtCore.QSettings) -> tuple[str, bool]:
    """(source, gpt2_missing): the model asked for, else the remembered one if it can still be opened, else the default."""
    if asked is not None:
        return asked, False
    remembered = settings.value("model/last")
    if remembered and still_available(str(remembered)):
        return str(remembered), False
    return default_model_choice()


def parse_select(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        layer, head = (int(x) for x in text.split("."))
    except ValueError:
        raise SystemExit(f"attnscope: error: --select takes LAYER.HEAD, e.g. 3.1 (got {text!r})") from None
    return layer, head


def screenshot_settings() -> QtCore.QSettings:
    """A throw-away settings file: a --screenshot run never reads or writes the user's settings."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="attnscope-screenshot-settings-")
    return QtCore.QSettings(str(Path(folder) / "settings.ini"), QtCore.QSettings.Format.IniFormat)


def run_app(args) -> int:
    select = parse_select(getattr(args, "select", None))
    screenshot_dir: Path | None = getattr(args, "screenshot", None)
    app = ensure_qapp()
    from .window import MainWindow

    window = MainWindow(screenshot_settings() if screenshot_dir is not None else None)
    if args.device and args.device != "auto":
        window.model_bar.set_device(args.device)  # not probed yet: loading will say if it is not there
    source, gpt2_missing = choose_source(args.model, window.settings)
    if gpt2_missing:
        from .downloads import offer_gpt2_download

        offer_gpt2_download(window, about=source)
    text = args.text if args.text is not None else (DEFAULT_TEXT if screenshot_dir else "")
    if not text:
        recent = window.text_input.recent_texts()
        text = recent[0] if recent else DEFAULT_TEXT
    window.set_text(text)
    status = {"code": 0}

    if select is not None:
        def apply_select(_request_id):
            window.result_shown.disconnect(apply_select)
            try:
                window.select_head(*select)
            except ValueError:
                r = window.state.result
                window.show_error(f"--select {select[0]}.{select[1]}: this model has layers 0–{r.n_layer - 1} "
                                  f"and heads 0–{r.n_head - 1}.")

        window.result_shown.connect(apply_select)

    if screenshot_dir is not None:
        def fail(message: str) -> None:
            print(f"attnscope: error: {message}", file=sys.stderr)
            status["code"] = 1
            window.close()
            app.exit(1)

        def shoot(_request_id) -> None:
            window.result_shown.disconnect(shoot)
            QtCore.QTimer.singleShot(400, lambda: take_screenshots(window, screenshot_dir, app, status))

        window.result_shown.connect(shoot)
        window.error_shown.connect(fail)
        QtCore.QTimer.singleShot(SCREENSHOT_TIMEOUT_MS, lambda: fail("timed out before the screenshots were taken"))
    window.show()
    window.load_model(source)
    # In --screenshot mode the app ends itself with app.exit(); closing the window must not also post a
    # Quit event, which would be left in the queue and end every later event loop of this process at once.
    quit_on_close = app.quitOnLastWindowClosed()
    app.setQuitOnLastWindowClosed(screenshot_dir is None and quit_on_close)
    try:
        code = app.exec()
    finally:
        app.setQuitOnLastWindowClosed(quit_on_close)
    return status["code"] or code


def grab(widget, path: Path) -> Path:
    QtWidgets.QApplication.processEvents()
    if not widget.grab().save(str(path)):
        raise OSError(f"cannot write {path}")
    return path


def take_screenshots(window, folder: Path, app, status) -> None:
    """Main views now; then the from-scratch tabs once the worker has computed them; then exit."""
    from .scores_view import ScoresPanel
    from .scratch import ScratchPanel

    taken = []

    def finish(code: int = 0) -> None:
        print("\n".join(str(p) for p in taken))
        status["code"] = status["code"] or code
        window.close()
        app.exit(status["code"])

    try:
        folder.mkdir(parents=True, exist_ok=True)
        window.tabs.setCurrentWidget(window.head_panel)
        taken += [grab(window, folder / "window.png"), grab(window.grid_panel.plot, folder / "grid.png"),
                  grab(window.head_panel.plot, folder / "detail.png")]
        window.tabs.setCurrentWidget(window.tab(ScoresPanel))
        taken += [grab(window.tab(ScoresPanel), folder / "scores.png")]
    except OSError as exc:
        print(f"attnscope: error: screenshots: {exc}", file=sys.stderr)
        finish(1)
        return
    scratch = window.tab(ScratchPanel)
    done = []

    def shoot_scratch(*_args) -> None:
        if done:
            return
        done.append(True)
        scratch.data_shown.disconnect(shoot_scratch)
        try:
            for index in range(scratch.count()):
                scratch.setCurrentIndex(index)
                name = "".join(c if c.isalnum() else "-" for c in scratch.tabText(index).lower()).strip("-")
                taken.append(grab(window, folder / f"scratch-{name}.png"))
            scratch.setCurrentIndex(0)
        except OSError as exc:
            print(f"attnscope: error: screenshots: {exc}", file=sys.stderr)
            finish(1)
            return
        finish(0)

    scratch.data_shown.connect(shoot_scratch)
    window.tabs.setCurrentWidget(scratch)
    QtCore.QTimer.singleShot(SCRATCH_WAIT_MS, shoot_scratch)  # its data may be on screen already
