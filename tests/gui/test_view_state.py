"""The ViewState (Qt, no window): the attention-view switch and the lenses of the bundle on screen."""
import pytest

pytest.importorskip("pytestqt")
from PySide6 import QtCore  # noqa: E402

from helpers import bundle  # noqa: E402


@pytest.fixture
def state(qtbot):
    from gui.qt import ensure_qapp
    from gui.state.view_state import ViewState

    ensure_qapp()
    return ViewState()


def test_attention_view_is_validated_and_emits_only_on_a_change(state):
    from gui.state.view_state import ATTENTION_VIEWS

    seen = []
    state.attention_view_changed.connect(seen.append)
    assert state.attention_view == "weights" and ATTENTION_VIEWS == ("weights", "value-weighted")
    state.set_attention_view("value-weighted")
    state.set_attention_view("value-weighted")
    assert seen == ["value-weighted"] and state.attention_view == "value-weighted"
    with pytest.raises(ValueError):
        state.set_attention_view("values")
    assert state.attention_view == "value-weighted"


def test_the_attention_view_is_saved_and_a_bad_stored_value_ignored(tmp_path):
    from gui.state.view_state import ViewState

    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    first = ViewState(settings)
    first.set_attention_view("value-weighted")
    first.save_settings()
    assert ViewState(settings).attention_view == "value-weighted"
    settings.setValue("view/attention_view", "nonsense")
    assert ViewState(settings).attention_view == "weights"


def test_the_rollouts_skip_first_is_its_own_setting_saved_and_emitted_only_on_a_change(state, tmp_path):
    from gui.state.view_state import ViewState

    seen, head = [], []
    state.rollout_skip_first_changed.connect(seen.append)
    state.hide_first_changed.connect(head.append)
    assert state.rollout_skip_first is False
    state.set_rollout_skip_first(True)
    state.set_rollout_skip_first(True)
    assert seen == [True] and state.rollout_skip_first and not state.hide_first and head == []
    state.set_hide_first(True)
    state.set_hide_first(False)
    assert state.rollout_skip_first and seen == [True]  # the Head tab's hide-first leaves it alone
    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    first = ViewState(settings)
    first.set_rollout_skip_first(True)
    first.save_settings()
    again = ViewState(settings)
    assert again.rollout_skip_first and not again.hide_first


def test_a_lens_is_kept_only_for_the_bundle_on_screen(state, tiny_result):
    changed = []
    state.lens_changed.connect(changed.append)
    assert not state.set_lens(1, "rollout", "R")  # no bundle on screen: dropped
    state.set_bundle(bundle(tiny_result, request_id=5))
    assert not state.set_lens(4, "rollout", "old")  # an answer for an older result: dropped
    assert state.lens("rollout") is None and changed == []
    assert state.set_lens(5, "rollout", "R")
    assert state.lens("rollout") == "R" and state.lens("value_norms") is None and changed == ["rollout"]
    assert state.set_lens_error(5, "value_norms", "It failed.")
    assert state.lens_error("value_norms") == "It failed." and changed[-1] == "value_norms"
    state.set_bundle(bundle(tiny_result, request_id=6))  # a new result: the old lenses mean nothing now
    assert state.lens("rollout") is None and state.lens_error("value_norms") is None
    assert not state.set_lens_error(5, "rollout", "late")
    with pytest.raises(ValueError):
        state.lens("attention_flow")
    with pytest.raises(ValueError):
        state.set_lens(6, "attention_flow", 1)


def test_sink_epsilon_is_validated_saved_and_emits_only_on_a_change(state, tmp_path):
    from analysis.measures.lenses import SINK_EPSILON
    from gui.state.view_state import ViewState

    seen = []
    state.sink_epsilon_changed.connect(seen.append)
    assert state.sink_epsilon == SINK_EPSILON == 0.3
    state.set_sink_epsilon(0.5)
    state.set_sink_epsilon(0.5)
    assert seen == [0.5]
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError):
            state.set_sink_epsilon(bad)
    assert state.sink_epsilon == 0.5
    settings = QtCore.QSettings(str(tmp_path / "s.ini"), QtCore.QSettings.Format.IniFormat)
    first = ViewState(settings)
    first.set_sink_epsilon(0.45)
    first.save_settings()
    assert ViewState(settings).sink_epsilon == 0.45
    settings.setValue("view/sink_epsilon", "lots")
    assert ViewState(settings).sink_epsilon == SINK_EPSILON  # a bad stored value is ignored


def test_the_placeholder_is_one_line_or_none(state):
    seen = []
    state.placeholder_changed.connect(seen.append)
    assert state.placeholder is None
    state.set_placeholder("loading the model…")
    state.set_placeholder("loading the model…")
    state.set_placeholder("")
    assert seen == ["loading the model…", None] and state.placeholder is None


def test_a_sliced_bundle_reaches_one_view_per_turn_and_a_newer_one_ends_it(qtbot, state, tiny_result):
    seen = []
    first, second = bundle(tiny_result, None, 1), bundle(tiny_result, None, 2)

    def view_a(b):
        seen.append(("a", b.request_id, state.bundle.request_id))
        QtCore.QTimer.singleShot(0, lambda: seen.append("a later turn"))  # runs before the next view: one a turn
        if b is first and len(seen) == 1:
            state.set_bundle(second, sliced=True)  # a newer result before the first reached every view

    state.on_bundle(view_a, "a")
    for name in ("b", "c"):
        state.on_bundle(lambda b, name=name: seen.append((name, b.request_id, state.bundle.request_id)), name)
    shown = []
    state.bundle_shown.connect(shown.append)
    state.set_bundle(first, sliced=True)
    assert state.bundle is first and seen == []  # the state has it at once; the views from a later turn
    qtbot.waitUntil(lambda: bool(shown), timeout=2000)
    qtbot.wait(20)
    assert seen == [("a", 1, 1), "a later turn", ("a", 2, 2), "a later turn", ("b", 2, 2), ("c", 2, 2)]
    assert shown == [2] and [name for name, _ms in state.slice_times] == ["a", "b", "c"]  # no stale slice
    state.set_bundle(first)  # unsliced: every view at once
    assert seen[-3:] == [("a", 1, 1), ("b", 1, 1), ("c", 1, 1)] and shown == [2, 1]
