"""The tabs on the right of the window, and the protocol every tab follows.

A tab is a ``QWidget`` subclass with

- ``title: str`` — a class attribute, the tab's label;
- ``__init__(self, state: ViewState, worker: Worker, parent=None)`` — it subscribes to the view
  state's signals and writes user edits back through the state's setters (``state.select(l, h)``,
  ``state.set_colormap(name)`` …); it never reads another widget;
- optionally ``head_activated = Signal(int, int)`` — the user asked to open a head (Enter or a
  double-click on a score row or map cell); the window then selects it and shows the Head tab;
- ``offscreen_figure(self) -> QWidget | None`` — a fresh, clean export figure of what the tab shows
  (the caller disposes it with ``figures.dispose_figure``), used by Copy figure; None when the tab
  has nothing to draw.

A tab that needs the model asks the worker itself (``worker.submit(name, task)``, answers on
``worker.task_done``, failures on ``worker.failed``) and drops answers to requests it no longer
wants (a ``gui.state.jobs.Job`` does both), so the window holds no per-tab logic.

One naming rule: the tab ``<Name>Tab`` lives in ``gui/tabs/<name>/<name>_tab.py``, beside the modules only it
uses. A new tab is that folder plus one entry in ``TABS`` in gui/chrome/window.py
(tests/gui/test_tabs.py checks both, and the protocol).
"""
from __future__ import annotations

from typing import Protocol

from PySide6 import QtWidgets


class Tab(Protocol):
    """What the window relies on (``head_activated`` is optional)."""

    title: str

    def offscreen_figure(self) -> QtWidgets.QWidget | None: ...
