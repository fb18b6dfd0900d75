"""One name and one rounding for a head everywhere, and which heads stand out (issue 21 item 8)."""
import numpy as np

from analysis.display import format_score, head_name
from analysis.measures.head_scores import standout_heads


def test_a_head_is_named_layer_then_head():
    assert head_name(1, 0) == "L1H0"
    assert head_name(np.int64(29), np.int64(8)) == "L29H8"


def test_one_rounding_rule_for_a_score():
    assert format_score(0.9981) == "0.998"
    assert format_score(0.99951) == "1.000"
    assert format_score(0.770, signed=True) == "+0.770"
    assert format_score(-0.0123, signed=True) == "−0.012"
    assert format_score(float("nan")) == "–"


def _by_hand(values, floor, spread=3.0):
    flat = [v for v in values.ravel() if v == v]
    med = sorted(flat)[len(flat) // 2] if len(flat) % 2 else sum(sorted(flat)[len(flat) // 2 - 1:len(flat) // 2 + 1]) / 2
    dev = sorted(abs(v - med) for v in flat)
    mad = dev[len(dev) // 2] if len(dev) % 2 else (dev[len(dev) // 2 - 1] + dev[len(dev) // 2]) / 2
    return np.array([[v == v and v >= floor and v > med + spread * 1.4826 * mad for v in row] for row in values])


def test_standout_heads_are_above_the_floor_and_the_models_spread():
    rng = np.random.default_rng(0)
    values = rng.uniform(0.0, 0.2, size=(30, 9))
    values[3, 4], values[7, 1], values[9, 2] = 0.95, 0.5, 0.25  # the last is past the spread, under the floor
    values[2, 2] = np.nan
    got = standout_heads(values)
    np.testing.assert_array_equal(got, _by_hand(values, 0.3))
    assert {tuple(map(int, x)) for x in np.argwhere(got)} == {(3, 4), (7, 1)}


def test_a_weak_best_head_and_a_model_of_sinks_stand_out_nowhere():
    weak = np.full((12, 12), 0.02)
    weak[5, 5] = 0.14  # the model's best previous-token head, still weak: no badge
    assert not standout_heads(weak).any()
    sinks = np.full((30, 9), 0.9) + np.linspace(0, 0.05, 270).reshape(30, 9)  # most heads sinks: none stands out
    assert not standout_heads(sinks).any()
    assert not standout_heads(np.full((4, 4), np.nan)).any()


def test_low_side_for_a_score_where_small_is_the_finding():
    values = np.full((4, 4), 3.0) + np.arange(16).reshape(4, 4) * 0.01
    values[1, 2] = 0.2
    assert {tuple(map(int, x)) for x in np.argwhere(standout_heads(values, floor=None, low=True))} == {(1, 2)}


def test_an_estimate_for_people():
    from analysis.display import format_duration, seconds_left

    assert seconds_left(10.0, 2, 6) == 30.0 and seconds_left(0.0, 0, 6) is None
    assert [format_duration(s) for s in (0.2, 12.4, 150, 3900, None, float("nan"))] == [
        "1 s", "12 s", "2 min", "1 h 05 min", "?", "?"]
