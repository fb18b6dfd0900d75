"""Every tab of the window follows the tab protocol (gui/tabs/protocol.py) and the one naming rule:
``<Name>Tab`` in ``gui/tabs/<name>/<name>_tab.py``, and every such module's tab is in the window's TABS."""
import inspect
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore, QtWidgets  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def tab_modules() -> list[str]:
    """``gui.tabs.<name>.<name>_tab`` for every folder under gui/tabs/."""
    return sorted(f"gui.tabs.{folder.name}.{folder.name}_tab" for folder in (ROOT / "gui" / "tabs").iterdir()
                  if folder.is_dir() and (folder / "__init__.py").exists())


def test_every_tab_follows_the_protocol():
    from gui.chrome.window import TABS

    for tab in TABS:
        assert issubclass(tab, QtWidgets.QWidget), tab
        assert isinstance(tab.title, str) and tab.title, tab
        assert callable(tab.offscreen_figure), tab
        assert list(inspect.signature(tab.__init__).parameters)[:4] == ["self", "state", "worker", "parent"], tab
        if hasattr(tab, "head_activated"):
            assert isinstance(tab.head_activated, QtCore.Signal), tab


def test_every_tab_is_named_by_the_rule_and_every_tab_module_is_in_the_window():
    from gui.chrome.window import TABS

    named = [f"{tab.__module__}.{tab.__name__}" for tab in TABS]
    expected = []
    for module in tab_modules():
        name = module.split(".")[2]
        expected.append(f"{module}.{''.join(part.title() for part in name.split('_'))}Tab")
    assert sorted(named) == expected
    assert len({tab.title for tab in TABS}) == len(TABS)  # one label each
