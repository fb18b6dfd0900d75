"""Starting the app: which model to open, launch options, and the --screenshot mode."""
from __future__ import annotations

import sys
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from .qt import ensure_qapp

SCREENSHOT_TIMEOUT_MS = 300_000
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


def parse_select(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        layer, head = (int(x) for x in text.split("."))
    except ValueError:
        raise SystemExit(f"attnscope: error: --select takes LAYER.HEAD, e.g. 3.1 (got {text!r})") from None
    return layer, head


def run_app(args) -> int:
    select = parse_select(getattr(args, "select", None))
    screenshot_dir: Path | None = getattr(args, "screenshot", None)
    app = ensure_qapp()
    from .window import MainWindow

    window = MainWindow()
    if args.device and args.device != "auto":
        window.pending_device = args.device
        if window.device_choice.findText(args.device) < 0:
            window.device_choice.addItem(args.device)  # not probed yet: loading will say if it is not there
        window.device_choice.setCurrentText(args.device)
    gpt2_missing = False
    source = args.model
    if source is None:
        remembered = window.settings.value("model/last")
        if remembered and still_available(str(remembered)):
            source = str(remembered)
        else:
            source, gpt2_missing = default_model_choice()
    if gpt2_missing:
        from .downloads import offer_gpt2_download

        offer_gpt2_download(window)
    text = args.text if args.text is not None else (DEFAULT_TEXT if screenshot_dir else "")
    if not text:
        recent = window.recent_texts()
        text = recent[0] if recent else DEFAULT_TEXT
    window.set_text(text)
    status = {"code": 0}

    if select is not None:
        def apply_select(_request_id):
            window.select_head(*select)
            window.result_shown.disconnect(apply_select)

        window.result_shown.connect(apply_select)

    if screenshot_dir is not None:
        def fail(message: str) -> None:
            print(f"attnscope: error: {message}", file=sys.stderr)
            status["code"] = 1
            window.close()
            app.exit(1)

        def shoot(_request_id) -> None:
            QtCore.QTimer.singleShot(400, lambda: take_screenshots(window, screenshot_dir, app, status))

        window.result_shown.connect(shoot)
        window.error_shown.connect(fail)
        QtCore.QTimer.singleShot(SCREENSHOT_TIMEOUT_MS, lambda: fail("timed out waiting for the first result"))
    window.show()
    window.load_model(source)
    code = app.exec()
    return status["code"] or code


def grab(widget, path: Path) -> Path:
    QtWidgets.QApplication.processEvents()
    if not widget.grab().save(str(path)):
        raise OSError(f"cannot write {path}")
    return path


def take_screenshots(window, folder: Path, app, status) -> None:
    """Main views now; then the from-scratch tabs once the worker has computed them; then exit."""
    taken = []

    def finish(code: int = 0) -> None:
        print("\n".join(str(p) for p in taken))
        status["code"] = status["code"] or code
        window.close()
        app.exit(status["code"])

    try:
        folder.mkdir(parents=True, exist_ok=True)
        window.tabs.setCurrentIndex(0)
        taken += [grab(window, folder / "window.png"), grab(window.grid, folder / "grid.png"),
                  grab(window.detail, folder / "detail.png")]
        window.tabs.setCurrentIndex(1)
        taken += [grab(window.scores_panel, folder / "scores.png")]
    except OSError as exc:
        print(f"attnscope: error: screenshots: {exc}", file=sys.stderr)
        finish(1)
        return

    def scratch_ready(_request_id) -> None:
        window.scratch_shown.disconnect(scratch_ready)
        try:
            names = ("scratch-steps", "scratch-parity", "scratch-calculator", "scratch-sqrt-dk", "scratch-cost")
            for index, name in enumerate(names):
                window.scratch.setCurrentIndex(index)
                taken.append(grab(window, folder / f"{name}.png"))
            window.scratch.setCurrentIndex(0)
        except OSError as exc:
            print(f"attnscope: error: screenshots: {exc}", file=sys.stderr)
            finish(1)
            return
        finish(0)

    window.scratch_shown.connect(scratch_ready)
    window.tabs.setCurrentWidget(window.scratch)
