"""The command line under attack: every bad input is one line (exit 2) before the slow part, nothing is
cut without a word, nothing is half-written.

Each test here failed before its fix (an attack on the command line found the case). Most run
``main.main([...])`` in this process; where a model must not load, ``load_model`` is replaced by one
that fails the test, so "checked before the slow part" is proved, not timed.
"""
import json
import os

import numpy as np
import pytest

import main as cli
from analysis.measures import ablation, scan
from analysis.errors import InputError
from helpers import one_error_line, run_main as run

SHORT = "The cat sat on the mat because it was tired. The cat sat on the mat."
LONG = "The cat sat on the mat because it was tired. " * 40  # far more than the tiny model's 64 positions


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading a model fails the test: whatever is checked must be checked before."""
    import analysis.model.loading

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(analysis.model.loading, "load_model", refuse)


# ----------------------------------------------------------------------------- A: ablate says when it cut the text
def test_ablate_tokens_say_when_the_text_was_cut(tiny_model):
    from analysis.run.inference import tokenize

    long = ablation.text_tokens(tiny_model, LONG, bos=True)
    assert long.truncated and long.n_tokens == tiny_model.context_length == 64
    (warning,) = long.warnings
    assert "more than 63 tokens" in warning and "context holds 64 with BOS" in warning
    ids = tiny_model.tokenizer(LONG, add_special_tokens=False)["input_ids"]
    assert list(long.ids[1:]) == ids[:63]  # the first 63 tokens of the text, behind BOS
    short = ablation.text_tokens(tiny_model, SHORT, bos=False)
    assert not short.truncated and short.warnings == ()
    assert list(short.ids) == tiny_model.tokenizer(SHORT, add_special_tokens=False)["input_ids"]
    assert tokenize(tiny_model, SHORT, False)[0] == list(short.ids)


@pytest.mark.slow
def test_ablate_drops_a_byte_order_mark_as_a_run_does_and_honours_the_token_cap(tiny_model):
    """A BOM once ran as 3 extra tokens in ablate (loss 9.70 instead of 6.33 on the bundled model), while
    export dropped it; and the GUI's token cap was not passed, so the importance map ran another prefix."""
    from analysis.run.inference import run_text

    plain, marked = ablation.text_tokens(tiny_model, SHORT, bos=True), ablation.text_tokens(tiny_model, "\ufeff" + SHORT,
                                                                                          bos=True)
    assert marked.ids == plain.ids and "byte-order mark" in marked.warnings[0] and plain.warnings == ()
    assert ablation.ablate(tiny_model, "\ufeff" + SHORT, [(1, 0)], bos=True).baseline == \
        ablation.ablate(tiny_model, SHORT, [(1, 0)], bos=True).baseline
    capped = ablation.text_tokens(tiny_model, LONG, bos=True, max_tokens=10)
    assert capped.n_tokens == 10 and capped.truncated and "token cap" in capped.warnings[0]
    assert list(capped.ids) == list(run_text(tiny_model, LONG, bos=True, max_tokens=10).token_ids)
    assert ablation.importance_map(tiny_model, capped).n_tokens == 10


def test_ablate_results_carry_the_tokens_run(tiny_model):
    result = ablation.ablate(tiny_model, LONG, [(1, 0)], bos=True)
    assert result.truncated and result.n_tokens == 64
    cut = tiny_model.tokenizer.decode(tiny_model.tokenizer(LONG, add_special_tokens=False)["input_ids"][:63])
    same = ablation.ablate(tiny_model, cut, [(1, 0)], bos=True)  # the part that was run, given alone
    assert not same.truncated and same.n_tokens == 64
    assert result.baseline.loss == pytest.approx(same.baseline.loss, abs=1e-6)
    assert result.to_dict()["n_tokens"] == 64 and result.to_dict()["truncated"] is True


@pytest.mark.slow
def test_ablate_warns_and_records_the_cut_in_its_json(tiny_model_dir, tmp_path, capsys):
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", LONG, "--heads", "1.0", "--bos",
                            "--json", tmp_path / "a.json")
    assert code == 0, err
    assert err.startswith("attnscope: warning: The text has more than 63 tokens") and len(err.splitlines()) == 1
    data = json.loads(stdout)
    assert data["truncated"] is True and data["n_tokens"] == 64
    assert json.loads((tmp_path / "a.json").read_text(encoding="utf-8")) == data
    code, stdout, err = run(capsys, "ablate", "--model", tiny_model_dir, "--text", SHORT, "--importance", "--no-bos")
    assert code == 0 and err == ""
    data = json.loads(stdout)
    n = len(ablation.text_tokens(ablation_model(tiny_model_dir), SHORT, bos=False).ids)
    assert data["truncated"] is False and data["n_tokens"] == n


def ablation_model(folder):
    from analysis.model.loading import load_model

    return load_model(str(folder), device="cpu")


# ----------------------------------------------------------------------------- B: scan says when it cut texts
def test_scan_result_names_the_texts_it_cut(tiny_model):
    result = scan.scan_texts(tiny_model, [SHORT, LONG, LONG + " again"], batch_size=3, bos=True)
    assert result.truncated == (False, True, True)
    warning = result.truncation_warning()
    assert warning.startswith("2 of 3 texts were longer than the 64 tokens")
    assert scan.scan_texts(tiny_model, [SHORT], bos=True).truncation_warning() is None


@pytest.mark.slow
def test_scan_warns_on_stderr_when_it_cut_texts(tiny_model_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{SHORT}\n{LONG}\n", encoding="utf-8")
    code, _, err = run(capsys, "scan", "--model", tiny_model_dir, "--texts", texts, "--out", tmp_path / "o")
    assert code == 0, err
    assert "attnscope: warning: 1 of 2 texts were longer than" in err and "were cut" in err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text(encoding="utf-8"))
    assert summary["truncated_texts"] == 1


# ----------------------------------------------------------------------------- C: bench's options
@pytest.mark.parametrize("args, words", [
    (("--models", "small,,bundled"), "an empty item is not a model"),
    (("--models", "tiny"), "'tiny' is not a model"),
    (("--models", ""), "an empty item"),
    (("--ns", "1,5"), "from 2 to 1024 (GPT-2-small's context)"),
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
    args = cli.parse_args(["bench", "--models", "small, xl,small", "--ns", "16,128,16", "--repeats", "2"])
    assert args.models == ["small", "xl"] and args.ns == [16, 128] and args.repeats == 2


def fake_measurements(monkeypatch, calls):
    from gui import bench

    def bench_model(name, folder, ns, repeats, **kwargs):
        calls.append((name, ns, repeats))
        return [{"model": name, "n": n} for n in ns]

    monkeypatch.setattr(bench, "bench_model", bench_model)
    monkeypatch.setattr(bench, "print_header", lambda: None)
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # bench takes every core: not in the test process


@pytest.mark.parametrize("target, words", [("folder", "is a folder"), ("under a file", "is a file, not a folder")])
def test_bench_json_target_is_checked_before_measuring(target, words, tmp_path, capsys, monkeypatch):
    calls = []
    fake_measurements(monkeypatch, calls)
    (tmp_path / "file").write_text("x")
    path = tmp_path if target == "folder" else tmp_path / "file" / "b.json"
    code, _, err = run(capsys, "bench", "--models", "bundled", "--ns", "16", "--no-scan", "--json", path)
    assert code == 2 and words in one_error_line(err) and calls == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_bench_json_in_a_read_only_folder_is_refused_before_measuring(tmp_path, capsys, monkeypatch):
    calls = []
    fake_measurements(monkeypatch, calls)
    (tmp_path / "ro").mkdir(mode=0o555)
    code, _, err = run(capsys, "bench", "--models", "bundled", "--ns", "16", "--no-scan", "--json", tmp_path / "ro" / "b.json")
    assert code == 2 and "permission denied" in one_error_line(err) and calls == []


def test_bench_json_is_written_whole(tmp_path, capsys, monkeypatch):
    calls = []
    fake_measurements(monkeypatch, calls)
    target = tmp_path / "b.json"
    target.write_text("earlier")
    code, stdout, err = run(capsys, "bench", "--models", "bundled", "--ns", "16,32", "--repeats", "1", "--no-scan",
                            "--json", target)
    assert code == 0, err
    assert calls == [("bundled", [16, 32], 1)]
    data = json.loads(target.read_text(encoding="utf-8"))
    assert data["rows"] == [{"model": "bundled", "n": 16}, {"model": "bundled", "n": 32}] and data["repeats"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]  # no temporary file left
    # a failure while writing: one line, and the earlier file is as it was
    import analysis.export.folders

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(analysis.export.folders.os, "replace", full_disk)
    code, _, err = run(capsys, "bench", "--models", "bundled", "--ns", "16", "--no-scan", "--json", target)
    assert code == 2 and "the disk is full" in one_error_line(err)
    assert json.loads(target.read_text(encoding="utf-8"))["rows"][1]["n"] == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


# ----------------------------------------------------------------------------- D: parse errors are one line
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


def test_help_is_still_argparse_help(capsys):
    code, stdout, _ = run(capsys, "export", "--help")
    assert code == 0 and stdout.startswith("usage: attnscope export [-h]") and "--text-file" in stdout


# ----------------------------------------------------------------------------- E: --heads and --json before loading
@pytest.mark.parametrize("heads, words", [
    ("１.０", "not a head"), ("+1.0", "not a head"), ("1 .0", "not a head"), ("1_0.0", "not a head"),
    ("1.0,,1.1", "Head 2 of '1.0,,1.1' is empty"), ("1.0,", "is empty"), ("", "No heads"),
    ("1.0,0.2,1.0", "Head 1.0 is named twice"), ("1", "LAYER.HEAD"), ("1.2.3", "not a head"),
])
def test_ablate_heads_syntax_is_refused_before_the_model_loads(heads, words, capsys, no_model_load):
    code, stdout, err = run(capsys, "ablate", "--text", SHORT, "--heads", heads)
    assert code == 2 and words in one_error_line(err) and stdout == ""


def test_parse_head_list_reads_what_it_should():
    assert ablation.parse_head_list(" 1.0, 10.3 ,0.11") == [(1, 0), (10, 3), (0, 11)]
    assert ablation.parse_heads("1.0,2.3", 3, 4) == [(1, 0), (2, 3)]
    with pytest.raises(InputError, match="does not exist"):
        ablation.parse_heads("3.0", 3, 4)
    with pytest.raises(InputError, match="named twice"):
        ablation.parse_heads("01.0,1.00", 3, 4)  # the same head, written twice


@pytest.mark.parametrize("target, words", [("folder", "is a folder"), ("under a file", "is a file, not a folder"),
                                           ("empty", "needs a file name")])
def test_ablate_json_target_is_checked_before_the_model_loads(target, words, tmp_path, capsys, no_model_load):
    (tmp_path / "file").write_text("x")
    path = {"folder": tmp_path, "under a file": tmp_path / "file" / "a.json", "empty": ""}[target]
    code, stdout, err = run(capsys, "ablate", "--text", SHORT, "--heads", "1.0", "--json", path)
    assert code == 2 and words in one_error_line(err) and stdout == ""


# ----------------------------------------------------------------------------- F: --text-file as scan reads files
@pytest.mark.parametrize("command", ["export", "ablate"])
def test_text_file_with_nul_bytes_or_a_device_is_refused(command, tmp_path, capsys, no_model_load):
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"text\x00more")
    rest = ["--out", tmp_path / "o"] if command == "export" else ["--heads", "1.0"]
    code, _, err = run(capsys, command, "--text-file", nul, *rest)
    assert code == 2 and "NUL bytes" in one_error_line(err)
    if os.path.exists("/dev/zero"):
        code, _, err = run(capsys, command, "--text-file", "/dev/zero", *rest)
        assert code == 2 and "not a regular text file" in one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nul.txt"]


def test_scan_and_text_file_read_with_one_function(tmp_path, monkeypatch):
    import analysis.measures.scan
    import analysis.textfiles

    seen = []
    real = analysis.textfiles.read_text_file

    def spy(path, limit):
        seen.append(str(path))
        return real(path, limit)

    monkeypatch.setattr(analysis.textfiles, "read_text_file", spy)
    monkeypatch.setattr(analysis.measures.scan, "read_text_file", spy)
    f = tmp_path / "t.txt"
    f.write_text("one\ntwo\n", encoding="utf-8")
    assert cli.read_text_file(f) == ("one\ntwo\n", [])
    assert scan.read_texts(f) == ["one", "two"]
    assert seen == [str(f), str(f)]


# ----------------------------------------------------------------------------- G: scan's folder limit is the folder's
def test_scan_folder_limit_names_the_folder_not_a_file(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("a" * 600, encoding="utf-8")
    (folder / "b.txt").write_text("b" * 600, encoding="utf-8")  # each under the limit, together over it
    with pytest.raises(InputError) as caught:
        scan.read_texts(folder, limit=1000)
    message = str(caught.value)
    assert message.startswith(f"The .txt files in {folder} hold more than 1,000 bytes of text in all")
    assert "b.txt" not in message
    assert scan.read_texts(folder, limit=1200) == ["a" * 600, "b" * 600]  # exactly at the limit: read
    (folder / "c.txt").write_text("", encoding="utf-8")  # an empty file after the limit is reached is fine
    assert scan.read_texts(folder, limit=1200) == ["a" * 600, "b" * 600]


def test_scan_file_limit_still_names_the_file(tmp_path):
    f = tmp_path / "big.txt"
    f.write_text("a line\n" * 100, encoding="utf-8")
    with pytest.raises(InputError, match=r"big.txt holds more than 200 bytes of text; scan a part of it"):
        scan.read_texts(f, limit=200)


# ----------------------------------------------------------------------------- H: a text with no tokens, by number
def test_scan_names_the_text_that_has_no_tokens(tmp_path):
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    folder = save_random_family(tmp_path / "bert", "bert")
    loaded = load_model(str(folder), device="cpu")
    with pytest.raises(InputError) as caught:
        scan.scan_texts(loaded, ["The cat sat", "\u200b"], bos=False)
    assert str(caught.value).startswith("Text 2: ") and "no tokens" in str(caught.value)


# ----------------------------------------------------------------------------- I: small things
def test_the_encoder_refusal_reads_as_english(tmp_path):
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    loaded = load_model(str(save_random_family(tmp_path / "bert", "bert")), device="cpu")
    with pytest.raises(InputError) as caught:
        ablation.heads_site(loaded)
    message = str(caught.value)
    assert f"this model ({loaded.family.title}) is an encoder" in message
    assert "encoder, an encoder" not in message


@pytest.mark.parametrize("argv", [["--device=", "ablate", "--text", "a", "--heads", "0.0"],
                                  ["export", "--device", " ", "--text", "a", "--out", "o"],
                                  ["scan", "--device=", "--out", "o"]])
def test_an_empty_device_is_a_parse_error(argv, capsys, no_model_load):
    code, _, err = run(capsys, *argv)
    assert code == 2 and "argument --device: needs a device" in one_error_line(err)


def test_a_named_device_is_passed_on():
    assert cli.parse_args(["--device", "cpu", "scan", "--out", "o"]).device == "cpu"
    assert cli.parse_args(["scan", "--out", "o"]).device == "auto"
