"""Starting the app: which model to open, launch options, and the --screenshot mode."""
from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import threading
from pathlib import Path

import shiboken6
from PySide6 import QtCore, QtWidgets

from analysis.display import head_name

from .input.token_limit import MAX_TOKENS_LIMIT
from .qt import ensure_qapp

SCREENSHOT_TIMEOUT_MS = 300_000
SCRATCH_WAIT_MS = 60_000
STOP_WAIT_S = 10.0  # the longest the app waits at its exit for a worker step that cannot be interrupted
EXIT_REFUSED = 2  # a --screenshot run that cannot do what was asked: as every refusal of the command line
DEFAULT_TEXT = "The server rejected the request because it was overloaded."


def default_model_choice() -> tuple[str, bool]:
    """(source, gpt2_missing): GPT-2 when it is in the local cache (no network is touched), else SmolLM2 when its
    package is installed (a real pretrained decoder, offline), else the bundled model."""
    from analysis.model.catalogue import BUNDLED, SMOLLM2, smollm2_file
    from analysis.model.hub import is_cached

    if is_cached("gpt2"):
        return "gpt2", False
    if smollm2_file() is not None:
        return SMOLLM2, True
    return BUNDLED, True


def still_available(source: str) -> bool:
    """A remembered model is reopened only if it can be without the network (a folder that still exists,
    the bundled model, or a hub model in the cache); otherwise the app starts on the default."""
    from analysis.errors import ModelLoadError
    from analysis.model.catalogue import resolve_source
    from analysis.model.hub import is_cached

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
    """``--select``'s head ("3.1" or "L3H1", ``analysis.measures.ablation.parse_one_head``), or None without one."""
    from analysis.errors import InputError
    from analysis.measures.ablation import parse_one_head

    if not text:
        return None
    try:
        return parse_one_head(text)
    except InputError as exc:
        print(f"attnscope: error: --select: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_REFUSED) from None


def screenshot_settings() -> QtCore.QSettings:
    """A throw-away settings file: a --screenshot run never reads or writes the user's settings."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="attnscope-screenshot-settings-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # every run left one behind in the temp folder
    return QtCore.QSettings(str(Path(folder) / "settings.ini"), QtCore.QSettings.Format.IniFormat)


class SignalCloser(QtCore.QObject):
    """Ctrl+C (SIGINT) and SIGTERM close the window as its close button does, and the app ends with
    128 + the signal's number (130, 143), as the command line does.

    Python runs a signal handler only between two of its bytecodes, and Qt's event loop waits in C++:
    without help a Ctrl+C waits for the next Python slot, which may never come. So the C-level handler
    also writes a byte to a socket (``signal.set_wakeup_fd``); a QSocketNotifier on the other end wakes
    the loop, its Python slot runs, and Python runs the handler first. A second signal while the app
    is already closing ends the process at once (nothing is left to save: the settings were written)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_signal, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.on_signal, self.received = on_signal, None
        self._reader, self._writer = socket.socketpair()
        for sock in (self._reader, self._writer):
            sock.setblocking(False)
        self._notifier = QtCore.QSocketNotifier(self._reader.fileno(), QtCore.QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._drain)
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno())
        self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}

    def _drain(self, *_args) -> None:
        try:
            self._reader.recv(64)  # the handler has run by now: Python ran it before this line
        except OSError:
            pass

    def _handle(self, signum: int, _frame) -> None:
        if self.received is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signum)
        self.received = signum
        self.on_signal(128 + signum)

    def restore(self) -> None:
        """Back to the handlers and wakeup fd there were before."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._notifier.setEnabled(False)
        self._reader.close()
        self._writer.close()


def run_app(args) -> int:
    """Open the window and run until it closes; returns the exit code (0, 2 for a --screenshot run that
    fails, 130 / 143 after Ctrl+C / SIGTERM). Every way out ends in :func:`close_down`."""
    select = parse_select(getattr(args, "select", None))
    screenshot_dir: Path | None = getattr(args, "screenshot", None)
    app = ensure_qapp()
    from .chrome.window import MainWindow

    status = {"code": 0}
    shown: dict = {"window": None}

    def leave(code: int) -> None:
        """End the app with ``code``: the window closes as by its close button, then the event loop ends.
        A signal while the window is still being built only records the code: the build finishes, then the
        app ends without running its loop."""
        status["code"] = status["code"] or code
        if shown["window"] is not None:
            shown["window"].close()
        app.exit(status["code"])

    # Before the window is built: a Ctrl+C during its seconds of construction raised KeyboardInterrupt inside
    # a half-built window or a pyqtgraph slot (a SIGSEGV at exit, or a traceback and an app that kept running).
    closer = SignalCloser(leave) if threading.current_thread() is threading.main_thread() else None
    # In --screenshot mode the app ends itself with app.exit(); closing the window must not also post a
    # Quit event, which would be left in the queue and end every later event loop of this process at once.
    quit_on_close = app.quitOnLastWindowClosed()
    code, ended, window = 0, True, None
    try:
        window = shown["window"] = MainWindow(screenshot_settings() if screenshot_dir is not None else None)
        if not status["code"]:
            start(window, args, select, screenshot_dir, leave, status)
        app.setQuitOnLastWindowClosed(screenshot_dir is None and quit_on_close)
        if not status["code"]:  # else a signal came during the start: app.exit() cannot end a loop not yet run
            code = app.exec()
    finally:
        app.setQuitOnLastWindowClosed(quit_on_close)
        if window is not None:
            ended = close_down(window)
        shown["window"] = window = None  # the last references: nothing of the window is left for Python's exit
        gc.collect()
        if closer is not None:
            closer.restore()
            closer.deleteLater()
    code = status["code"] or code
    if not ended:
        # A step that cannot be interrupted is still running on the worker after STOP_WAIT_S. Python's
        # exit would kill that thread inside torch, which aborts the process: end it here instead
        # (the settings are written; nothing else is left to save).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def start(window, args, select, screenshot_dir: Path | None, leave, status) -> None:
    """What the launch options ask for: the device, the model, the text, the chat format, the head, the
    screenshots."""
    if args.device and args.device != "auto":
        window.model_bar.set_device(args.device)  # not probed yet: loading will say if it is not there
    if getattr(args, "max_tokens", None) is not None:
        window.token_limit.use_for_session(min(args.max_tokens, MAX_TOKENS_LIMIT))
    source, gpt2_missing = choose_source(args.model, window.settings)
    if gpt2_missing:
        from .chrome.downloads import offer_gpt2_download

        offer_gpt2_download(window, about=source)
    text = args.text if args.text is not None else (DEFAULT_TEXT if screenshot_dir else "")
    if not text:
        text = window.text_input.last_text() or DEFAULT_TEXT
    window.set_text(text)
    if getattr(args, "chat", False):
        window.state.set_chat(True)

        def check_chat(_request_id) -> None:  # asked for on the command line: a model without a chat format says so
            window.result_shown.disconnect(check_chat)
            if window.state.chat_problem is not None:
                window.show_error(f"--chat: {window.state.chat_problem} The text ran without the chat format.")

        window.result_shown.connect(check_chat)

    if select is not None:
        def apply_select(_request_id):
            window.result_shown.disconnect(apply_select)
            try:
                window.select_head(*select)
            except ValueError:
                r = window.state.result
                window.show_error(f"--select {head_name(*select)}: this model has layers 0–{r.n_layer - 1} "
                                  f"and heads 0–{r.n_head - 1}.")

        window.result_shown.connect(apply_select)

    if screenshot_dir is not None:
        def fail(message: str) -> None:
            if status["code"]:
                return  # already leaving: one message
            print(f"attnscope: error: {message}", file=sys.stderr)
            leave(EXIT_REFUSED)

        def shoot(_request_id) -> None:
            window.result_shown.disconnect(shoot)
            if not window.closed:
                QtCore.QTimer.singleShot(400, window, lambda: take_screenshots(window, screenshot_dir, leave))

        window.result_shown.connect(shoot)
        window.error_shown.connect(fail)
        QtCore.QTimer.singleShot(SCREENSHOT_TIMEOUT_MS, window,
                                 lambda: fail("timed out before the screenshots were taken"))
    window.show()
    window.load_model(source)


def close_down(window) -> bool:
    """The one way out, in order: the window closes (its settings saved, the worker told to stop: what
    runs is interrupted at its next module call), the worker thread is waited for (at most STOP_WAIT_S),
    then the window and every widget in it are destroyed while the QApplication still exists. Left to
    Python's exit, PySide destroys what is left in no particular order, a pyqtgraph item after the scene
    it belonged to (SIGSEGV), and kills a worker thread still inside torch (SIGABRT). Returns whether the
    worker thread (and the GGUF search's) has ended."""
    if shiboken6.isValid(window) and not window.closed:
        window.close()
    ended = window.worker.stop(STOP_WAIT_S)
    # the GGUF search was cancelled by the close and ends at its next folder; a first search may be importing
    # torch (transformers' table of the types it dequantizes), which Python's exit must not kill half-way
    ended = window.model_files.scanner.wait(STOP_WAIT_S) and ended
    if shiboken6.isValid(window):
        window.deleteLater()
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
    return ended


def shut_down_qt() -> None:
    """The process's last Qt step, after :func:`run_app`: every widget still there deleted (pyqtgraph's
    context menus are top-level widgets with no parent), then the QApplication, while Python still runs.
    Nothing is left for PySide's exit handler, which destroys what remains in no particular order."""
    app = QtWidgets.QApplication.instance()
    if app is None:
        return
    for widget in app.topLevelWidgets():
        widget.deleteLater()
    QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
    gc.collect()
    app.shutdown()


def grab(widget, path: Path) -> Path:
    QtWidgets.QApplication.processEvents()
    if not widget.grab().save(str(path)):
        raise OSError(f"cannot write {path}")
    return path


def screenshot_problem(folder: Path, exc: OSError) -> str:
    """One sentence for a screenshot that could not be saved: where, and why when the system said."""
    reason = exc.strerror or str(exc)
    return f"cannot save the screenshots in {folder}: {reason[:1].lower() + reason[1:]}"


def take_screenshots(window, folder: Path, leave) -> None:
    """Main views now; then the from-scratch tabs once the worker has computed them; then ``leave(code)``."""
    from .tabs.scores.scores_tab import ScoresTab
    from .tabs.scratch.scratch_tab import ScratchTab

    taken = []

    def finish(problem: OSError | None = None) -> None:
        if problem is None:
            print("\n".join(str(p) for p in taken))
        else:
            print(f"attnscope: error: {screenshot_problem(folder, problem)}", file=sys.stderr)
        leave(0 if problem is None else EXIT_REFUSED)

    try:
        folder.mkdir(parents=True, exist_ok=True)
        window.tabs.setCurrentWidget(window.head_tab)
        taken += [grab(window, folder / "window.png"), grab(window.grid_panel.plot, folder / "grid.png"),
                  grab(window.head_tab.plot, folder / "detail.png")]
        window.tabs.setCurrentWidget(window.tab(ScoresTab))
        taken += [grab(window.tab(ScoresTab), folder / "scores.png")]
    except OSError as exc:
        finish(exc)
        return
    scratch = window.tab(ScratchTab)
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
            finish(exc)
            return
        finish()

    scratch.data_shown.connect(shoot_scratch)
    window.tabs.setCurrentWidget(scratch)
    QtCore.QTimer.singleShot(SCRATCH_WAIT_MS, window, shoot_scratch)  # its data may be on screen already
