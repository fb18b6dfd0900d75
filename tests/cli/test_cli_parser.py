"""The command line's grammar (``cli.parser``, ``cli.arguments``): every parse error is one line naming the
help (exit 2) before anything loads; the model options mean the same before and after the command; each
argument type refuses what it cannot read.

Most tests run ``main.main([...])`` in this process (``helpers.run_main``); where a model must not load,
``load_model`` is replaced by one that fails the test, so "checked before the slow part" is proved, not timed.
"""
import subprocess
import sys
import time

import pytest

from cli.parser import build_parser, parse_args
from conftest import ROOT
from helpers import one_error_line, run_main as run

SHORT = "The cat sat on the mat because it was tired. The cat sat on the mat."


def attnscope(*args, timeout=300, env=None):
    """The real command in a fresh interpreter."""
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


# ----------------------------------------------------------------------------- parse errors are one line
@pytest.mark.parametrize("argv, words, command", [
    (["--bogus"], "unknown option --bogus", ""),
    (["export", "--text", "a", "--out", "o", "--bogus"], "unknown option --bogus", " export"),
    (["scan", "--out", "o", "extra"], "unrecognized arguments: extra", " scan"),
    (["export", "--text", "a"], "required: --out", " export"),
    (["ablate", "--text", "a", "--heads", "1.0", "--mode", "sum"], "invalid choice: 'sum'", " ablate"),
    (["scan", "--batch", "0", "--out", "o"], "at least 1", " scan"),
    (["calc", "--q", "[1]"], "required: --k, --v", " calc"),
    (["nosuchcommand"], "invalid choice: 'nosuchcommand'", ""),
    (["--select", "1"], "LAYER.HEAD", ""),
    # a typo is named, with the nearest option of the parser it was typed for: argparse reported the missing
    # --text, or --modle's value as an invalid command, and never the typo itself
    (["--modle", "gpt2"], "unknown option --modle (did you mean --model?)", ""),
    (["export", "--tetx", "hi", "--out", "o"], "unknown option --tetx (did you mean --text?)", " export"),
    (["ablate", "--text", "a", "--mdoe", "zero"], "unknown option --mdoe (did you mean --mode?)", " ablate"),
])
def test_every_parse_error_is_one_line_naming_the_help(argv, words, command, capsys, no_model_load):
    code, stdout, err = run(capsys, *argv)
    line = one_error_line(err)
    assert code == 2 and stdout == "" and words in line
    assert line.endswith(f"(see 'attnscope{command} --help')")


def test_help_is_argparse_help(capsys):
    code, stdout, _ = run(capsys, "export", "--help")
    assert code == 0 and stdout.startswith("usage: attnscope export [-h]") and "--text-file" in stdout


def test_help_is_fast():
    t = time.time()
    out = attnscope("--help")
    assert out.returncode == 0 and "export" in out.stdout
    assert time.time() - t < 10


# ----------------------------------------------------------------------------- the model options
@pytest.mark.parametrize("argv,expected", [
    (["--model", "m", "--device", "cpu", "--dtype", "bfloat16", "--allow-pickle", "export", "--text", "a", "--out", "o"],
     ("m", "cpu", "bfloat16", True)),
    (["export", "--model", "m", "--device", "cpu", "--dtype", "bfloat16", "--allow-pickle", "--text", "a", "--out", "o"],
     ("m", "cpu", "bfloat16", True)),
    (["--model", "m", "scan", "--out", "o"], ("m", "auto", "float32", False)),
    (["--model", "m", "ablate", "--text", "a", "--model", "n"], ("n", "auto", "float32", False)),  # the later wins
    (["--device", "cpu", "ablate", "--text", "a"], ("bundled", "cpu", "float32", False)),
    (["scan", "--out", "o"], ("bundled", "auto", "float32", False)),
    ([], (None, "auto", "float32", False)),  # the app: the last model used, or the bundled one
])
def test_model_options_mean_the_same_before_and_after_the_command(argv, expected):
    """A model option given before the command is kept: the subcommand's defaults never overwrite it."""
    args = parse_args(argv)
    assert (args.model, args.device, args.dtype, args.allow_pickle) == expected


@pytest.mark.parametrize("argv", [["--device=", "ablate", "--text", "a", "--heads", "0.0"],
                                  ["export", "--device", " ", "--text", "a", "--out", "o"],
                                  ["scan", "--device=", "--out", "o"]])
def test_an_empty_device_is_a_parse_error(argv, capsys, no_model_load):
    code, _, err = run(capsys, *argv)
    assert code == 2 and "argument --device: needs a device" in one_error_line(err)


def test_a_named_device_is_passed_on():
    assert parse_args(["--device", "cpu", "scan", "--out", "o"]).device == "cpu"
    assert parse_args(["scan", "--out", "o"]).device == "auto"


# ----------------------------------------------------------------------------- the argument types
@pytest.mark.parametrize("value,head", [("3.1", (3, 1)), ("99.99", (99, 99)), ("L3H1", (3, 1)), ("l3h1", (3, 1)),
                                        (" L0H2 ", (0, 2)), ("-1.-1", None), ("1", None), ("a.b", None),
                                        ("1.2.3", None), ("1.-2", None), ("L3", None), ("L3H1,L0H0", None),
                                        ("3.1,", None)])
def test_select_takes_one_head_as_layer_dot_head_or_l1h0(value, head):
    from gui.app import parse_select

    parser = build_parser()
    if head is not None:
        given = parser.parse_args([f"--select={value}"]).select
        assert given == value.strip() and parse_select(given) == head
    else:
        with pytest.raises(SystemExit):
            parser.parse_args([f"--select={value}"])


@pytest.mark.parametrize("heads, words", [
    ("１.０", "not a head"), ("+1.0", "not a head"), ("1 .0", "not a head"), ("1_0.0", "not a head"),
    ("1.0,,1.1", "Head 2 of '1.0,,1.1' is empty"), ("1.0,", "is empty"), ("", "No heads"),
    ("1.0,0.2,1.0", "L1H0 is named twice"), ("1", "LAYER.HEAD"), ("1.2.3", "not a head"),
])
def test_ablate_heads_syntax_is_refused_before_the_model_loads(heads, words, capsys, no_model_load):
    code, stdout, err = run(capsys, "ablate", "--text", SHORT, "--heads", heads)
    assert code == 2 and words in one_error_line(err) and stdout == ""


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "half"])
def test_a_bad_sink_epsilon_is_refused_before_anything_runs(value, tmp_path, capsys):
    code, _, err = run(capsys, "export", "--text", "a", "--out", tmp_path / "x", "--sink-epsilon", value)
    assert code == 2 and "between 0 and 1" in err and not (tmp_path / "x").exists()


@pytest.mark.parametrize("args, words", [(("--batch", "0"), "at least 1"), (("--max-texts", "x"), "at least 1")])
def test_scan_counts_must_be_positive(args, words, tmp_path, capsys):
    code, _, err = run(capsys, "scan", "--out", tmp_path / "o", *args)
    assert code == 2 and words in err


@pytest.mark.parametrize("args, words", [
    (("--models", "small,,bundled"), "an empty item is not a model"),
    (("--models", "tiny"), "'tiny' is not a model"),
    (("--models", ""), "an empty item"),
    (("--ns", "1,5"), "from 2 to 1,024 (GPT-2-small's context)"),
    (("--ns", "16,2000"), "'2000' is not a token count"),
    (("--ns", "16,"), "an empty item"),
    (("--ns", "１６"), "is not a token count"),
    (("--ns", "-4"), "is not a token count"),
    (("--repeats", "0"), "at least 1"),
    (("--repeats", "two"), "at least 1"),
    (("--json", ""), "needs a file name"),
])
def test_bench_options_are_checked_by_the_parser(args, words, capsys, no_model_load):
    code, stdout, err = run(capsys, "bench", *args)
    line = one_error_line(err)
    assert code == 2 and words in line and stdout == "" and line.endswith("(see 'attnscope bench --help')")


def test_bench_options_become_lists():
    args = parse_args(["bench", "--models", "small, xl,small", "--ns", "16,128,16", "--repeats", "2"])
    assert args.models == ["small", "xl"] and args.ns == [16, 128] and args.repeats == 2
