"""``attnscope calc``: the attention calculator prints its steps as strict JSON; bad input is one sentence."""
import json

import pytest

from helpers import one_error_line, run_main as run


def test_calc_prints_the_worked_example(capsys):
    code, out, err = run(capsys, "calc", "--q", "[1, 0, 0.5, 1]", "--k", "[[1,0,0.8,1],[0,1,0.2,0],[0.2,0.2,0.4,0.1]]",
                         "--v", "[[0.9,0.1,0.7,0.8],[0.1,0.9,0.2,0.1],[0.3,0.3,0.5,0.2]]")
    assert code == 0, err
    steps = json.loads(out)
    assert [round(x, 4) for x in steps["weights"][0]] == [0.5871, 0.1859, 0.2270]
    assert [round(x, 4) for x in steps["output"][0]] == [0.6151, 0.2941, 0.5616, 0.5337]
    assert steps["scaled"][0] == pytest.approx([1.2, 0.05, 0.25])


def test_calc_overflow_is_valid_json_with_a_note(capsys):
    code, out, err = run(capsys, "calc", "--q", "[1e308,1e308]", "--k", "[[1e308,1e308],[1,1]]", "--v", "[[1,2],[3,4]]")
    assert code == 0 and "beyond 64-bit floats" in err
    steps = json.loads(out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert steps["weights"] == [[1.0, 0.0]] and steps["scores"] == [[None, None]]


@pytest.mark.parametrize("q,message", [
    ("[1,", "not JSON"),
    ("[" + "1" * 400 + "]", "too large"),
    ("[" * 50_000, "nested too deeply"),
    ("[[1],[1,2]]", "ragged"),
])
def test_calc_bad_input_is_a_sentence(capsys, q, message):
    code, _, err = run(capsys, "calc", "--q", q, "--k", "[[1]]", "--v", "[[1]]")
    assert code == 2 and message in one_error_line(err)


def test_calc_causal_with_more_queries_than_keys(capsys):
    code, _, err = run(capsys, "calc", "--q", "[[1],[2],[3]]", "--k", "[[1]]", "--v", "[[1]]", "--causal")
    assert code == 2 and "3 queries need at least 3 keys" in one_error_line(err)
