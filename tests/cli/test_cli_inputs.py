"""What the commands read and where they write (``cli.inputs``, the path types of ``cli.arguments``): no
command writes over what it reads, every path option is checked when it is parsed, ``--text-file`` is read as
scan reads its files, and every output target is checked before the model loads.

``ablate --text-file notes.txt --json notes.txt`` is refused, as is an ``--out`` holding the model or the texts,
and a name too long for the file system is one sentence. Every refusal here comes before the model loads
(``no_model_load``).
"""
import os
import re
import time
from pathlib import Path

import pytest

from analysis.measures import scan_inputs
from cli import inputs
from cli.parser import parse_args
from helpers import one_error_line, run_main as run

NOTES = "The cat sat on the mat.\n"
SHORT = "The cat sat on the mat because it was tired. The cat sat on the mat."


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working folder with notes.txt, a texts folder and a model folder; the current folder is it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("One text.", encoding="utf-8")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}", encoding="utf-8")
    return tmp_path


def contents(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- 2: never over an input
@pytest.mark.parametrize("argv, words", [
    (["ablate", "--text-file", "notes.txt", "--heads", "0.0", "--json", "notes.txt"],
     "--json notes.txt is --text-file notes.txt: AttnScope never writes over what it reads; choose another --json."),
    (["ablate", "--text-file", "notes.txt", "--heads", "0.0", "--json", "texts/../notes.txt"],
     "is --text-file notes.txt:"),
    (["ablate", "--model", "model", "--text", "a", "--heads", "0.0", "--json", "model/config.json"],
     "--json model/config.json is config.json in --model model:"),
    (["export", "--text-file", "texts/a.txt", "--out", "texts"],
     "--out texts holds --text-file texts/a.txt: an export there would delete it; choose another --out."),
    (["export", "--model", "model", "--text", "a", "--out", "model"], "--out model is --model model:"),
    (["export", "--model", "model", "--text", "a", "--out", "."], "--out . holds --model model:"),
    (["scan", "--texts", "texts", "--out", "texts"], "--out texts is --texts texts:"),
    (["scan", "--texts", "notes.txt", "--out", "notes.txt"], "--out notes.txt is --texts notes.txt:"),
])
def test_no_command_writes_over_what_it_reads(place, argv, words, capsys, no_model_load):
    before = contents(place)
    code, stdout, err = run(capsys, *argv)
    assert code == 2 and stdout == "" and words in one_error_line(err)
    assert contents(place) == before


def test_an_export_over_the_bundled_model_or_the_sample_texts_is_refused(capsys, no_model_load):
    from analysis.model.catalogue import BUNDLED_MODEL_DIR
    from analysis.measures.scan_inputs import SAMPLE_TEXTS

    code, _, err = run(capsys, "export", "--text", "a", "--out", BUNDLED_MODEL_DIR.parent)
    assert code == 2 and "holds --model bundled" in one_error_line(err)
    code, _, err = run(capsys, "scan", "--texts", "sample", "--out", SAMPLE_TEXTS.parent)
    assert code == 2 and "holds --texts sample" in one_error_line(err)


def test_a_hard_link_or_a_link_to_the_text_is_the_text(place, capsys, no_model_load):
    os.link(place / "notes.txt", place / "copy.json")
    (place / "link.json").symlink_to(place / "notes.txt")
    for target, how in (("copy.json", "(the same file under another name: a hard link)"),
                        ("link.json", "(through a link)")):
        code, _, err = run(capsys, "ablate", "--text-file", place / "notes.txt", "--heads", "0.0", "--json", target)
        assert code == 2 and how in one_error_line(err)
    assert (place / "notes.txt").read_text(encoding="utf-8") == NOTES


# ----------------------------------------------------------------------------- 7b: names the file system cannot hold
LONG_NAME = "n" * 300


@pytest.mark.parametrize("argv, option", [
    (["export", "--text", "a", "--out", LONG_NAME], "--out"),
    (["export", "--text", "a", "--out", f"fine/{LONG_NAME}/deeper"], "--out"),
    (["ablate", "--text", "a", "--heads", "0.0", "--json", f"{LONG_NAME[5:]}.json"], "--json"),
    (["scan", "--texts", LONG_NAME, "--out", "o"], "--texts"),
    (["--model", LONG_NAME, "export", "--text", "a", "--out", "o"], "--model"),
    (["export", "--model", f"./{LONG_NAME}", "--text", "a", "--out", "o"], "--model"),
    (["export", "--text-file", LONG_NAME, "--out", "o"], "--text-file"),
    (["ablate", "--text-file", LONG_NAME, "--heads", "0.0"], "--text-file"),
    (["bench", "--json", LONG_NAME], "--json"),
    (["--screenshot", LONG_NAME], "--screenshot"),
])
def test_a_name_too_long_is_refused_when_parsed_naming_the_option_and_the_limit(argv, option, capsys, no_model_load):
    code, stdout, err = run(capsys, *argv)
    line = one_error_line(err)
    assert code == 2 and stdout == ""
    assert f"argument {option}: a name in it is 300 bytes long ('nnnnnnnnnnnnnnnnnnnnnnnn…'); the file system " \
           "allows at most 255 bytes per name" in line


def test_a_path_too_long_is_refused_when_parsed(capsys, no_model_load):
    deep = "/".join(["d" * 100] * 45)  # every name fine, the whole over Linux's 4096
    code, _, err = run(capsys, "export", "--text", "a", "--out", deep)
    assert code == 2 and "argument --out: it is " in one_error_line(err) and "as a full path; the file system " \
        "allows at most 4,095 bytes" in err


def test_words_that_are_not_paths_pass_as_they_are():
    args = parse_args(["scan", "--texts", "sample", "--model", "bundled", "--out", "o"])
    assert args.texts == "sample" and args.model == "bundled"
    assert parse_args(["--model", "HuggingFaceTB/SmolLM2-135M"]).model == "HuggingFaceTB/SmolLM2-135M"
    assert parse_args(["--model", "minilm"]).model == "minilm"


# ----------------------------------------------------------------------------- 18, 21c: the export folder
def test_an_earlier_export_holding_the_users_file_is_refused_before_the_model_loads(tmp_path, capsys, no_model_load):
    from analysis.export.folders import write_folder_atomically

    out = tmp_path / "out"
    write_folder_atomically(out, lambda folder: (folder / "summary.json").write_text("{}"))
    (out / "mine.txt").write_text("mine")
    code, _, err = run(capsys, "export", "--text", "a", "--out", out)
    assert code == 2 and f"{out} holds mine.txt, which AttnScope did not write" in one_error_line(err)
    assert (out / "mine.txt").read_text() == "mine"


def test_a_dangling_link_as_out_is_called_a_link_to_nothing(tmp_path, capsys, no_model_load):
    (tmp_path / "out").symlink_to(tmp_path / "missing")
    code, _, err = run(capsys, "export", "--text", "a", "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 2 and f"is a link to {tmp_path / 'missing'}, which does not exist" in line
    assert "a file" not in line


# ----------------------------------------------------------------------------- one spelling of every path
def test_a_home_folder_path_is_expanded_once_when_parsed(place, monkeypatch, capsys, no_model_load):
    """``--json=~/model/config.json`` with ``--model=~/model``: the check compared the unexpanded '~/…' (which
    does not exist, so it was skipped) while the writer expanded it and replaced the model's config.json."""
    monkeypatch.setenv("HOME", str(place))
    args = parse_args(["ablate", "--model=~/model", "--text-file", "~/notes.txt", "--json=~/x.json",
                           "--heads", "0.0"])
    assert (args.model, args.text_file, args.json) == (str(place / "model"), place / "notes.txt", place / "x.json")
    args = parse_args(["--screenshot", "~/s", "scan", "--texts", "~/texts", "--out=~/o"])
    assert (args.texts, args.out, args.screenshot) == (str(place / "texts"), place / "o", place / "s")
    before = contents(place)
    code, stdout, err = run(capsys, "ablate", "--model=~/model", "--text", "hi", "--heads", "0.0",
                            "--json=~/model/config.json")
    assert code == 2 and stdout == "" and f"is config.json in --model {place / 'model'}:" in one_error_line(err)
    code, _, err = run(capsys, "export", "--text-file=~/texts/a.txt", "--out=~/texts")
    assert code == 2 and "holds --text-file" in one_error_line(err)
    assert contents(place) == before


def deep_path(base, total: int, last: str = "e" * 30):
    """A path under ``base`` of ``total`` bytes: folders of 100-byte names, then ``last`` (and padding)."""
    text = str(base)
    while len(text) + 101 + 1 + len(last) <= total:
        text += "/" + "d" * 100
    pad = total - len(text) - 1 - len(last)
    return text + "/" + "p" * pad + last if pad > 0 else text + "/" + last


def test_an_output_path_leaves_room_for_the_longest_name_the_export_writes(tmp_path, capsys, no_model_load):
    """Just under PATH_MAX: parsing passed it, the model ran, then "File name too long" for heads/L0H0.png."""
    out = deep_path(tmp_path, 4080)
    assert len(out) == 4080
    code, _, err = run(capsys, "export", "--text", "a", "--out", out)
    line = one_error_line(err)
    assert code == 2 and re.search(r"argument --out: it is 4,080 bytes long as a full path, and AttnScope writes "
                                   r"names up to [1-9][0-9] bytes longer in it; the file system allows at most "
                                   r"4,095 bytes", line)
    parent = os.path.dirname(deep_path(tmp_path, 4080))
    json_file = f"{parent}/{'p' * (4085 - len(parent) - len('//x.json'))}/x.json"  # its temporary name is longer
    code, _, err = run(capsys, "ablate", "--text", "a", "--heads", "0.0", "--json", json_file)
    assert code == 2 and re.search(rf"argument --json: it is {len(json_file):,} bytes long as a full path, and AttnScope writes "
                                   r"names up to [1-9][0-9] bytes longer", one_error_line(err))
    from analysis.export.paths import path_problem

    assert path_problem(out) is None  # an input of that length is fine: nothing is written in it


def test_a_message_about_a_long_path_keeps_its_reason(tmp_path, capsys, no_model_load):
    folder = deep_path(tmp_path, 3900, "f")
    os.makedirs(os.path.dirname(folder))
    with open(folder, "w") as f:
        f.write("a file")
    code, _, err = run(capsys, "export", "--text", "a", "--out", folder)
    line = one_error_line(err)
    assert code == 2 and line.endswith("is a file, not a folder: choose a folder for the export.") and "…" in line


# ----------------------------------------------------------------------------- the output targets
def test_out_must_name_a_folder(capsys):
    code, _, err = run(capsys, "export", "--text", "a", "--out", "")
    assert code == 2 and "needs a folder name" in err


@pytest.mark.parametrize("target, words", [("folder", "is a folder"), ("under a file", "is a file, not a folder"),
                                           ("empty", "needs a file name")])
def test_ablate_json_target_is_checked_before_the_model_loads(target, words, tmp_path, capsys, no_model_load):
    (tmp_path / "file").write_text("x")
    path = {"folder": tmp_path, "under a file": tmp_path / "file" / "a.json", "empty": ""}[target]
    code, stdout, err = run(capsys, "ablate", "--text", SHORT, "--heads", "1.0", "--json", path)
    assert code == 2 and words in one_error_line(err) and stdout == ""


# ----------------------------------------------------------------------------- --text-file: read as scan reads files
@pytest.mark.slow
def test_text_file_reads_are_bounded(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(inputs, "TEXT_FILE_LIMIT", 1000)
    big = tmp_path / "big.txt"
    big.write_bytes(b"\xef\xbb\xbf" + "word é ".encode() * 5000)  # a BOM, then more than the limit
    text, warnings = inputs.read_text_file(big, 1000)
    assert len(text.encode()) <= 1000 and "only its first" in warnings[0]
    assert text.startswith("\ufeff")  # removed (with a warning) by run_text, for the GUI's pastes too
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text-file", big, "--out", tmp_path / "o",
                       "--no-head-images")
    assert code == 0 and "byte-order mark" in err and "longer than" in err
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    code, _, err = run(capsys, "export", "--model", tiny_model_dir, "--text-file", bad, "--out", tmp_path / "p")
    assert code == 2 and "not UTF-8 text (byte 0xe9 at offset 3)" in one_error_line(err)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_is_refused_at_once():
    """A device is not a text file (read, /dev/zero is a text of NUL characters without end): refused as scan
    refuses it."""
    from analysis.errors import InputError

    started = time.perf_counter()
    with pytest.raises(InputError, match="not a regular text file"):
        inputs.read_text_file("/dev/zero")
    assert time.perf_counter() - started < 5


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_named_pipe_as_text_file_is_refused_without_blocking(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe")
    code, _, err = run(capsys, "export", "--text-file", tmp_path / "pipe", "--out", tmp_path / "o")
    assert code == 2 and "named pipe" in one_error_line(err)


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


@pytest.mark.parametrize("content, words", [(b"text\x00more", "holds NUL bytes: it looks like a binary file"),
                                             (b"caf\xe9", "is not UTF-8 text (byte 0xe9 at offset 3)"),
                                             (None, "it is not a regular text file")])
def test_a_text_file_is_read_as_scan_reads_its_files(content, words, tmp_path):
    """``--text-file`` and scan's texts accept the same files and refuse the rest in the same words."""
    from analysis.errors import InputError

    if content is None:
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero")
        f = Path("/dev/zero")
    else:
        f = tmp_path / "t.txt"
        f.write_bytes(content)
    with pytest.raises(InputError) as by_text_file:
        inputs.read_text_file(f)
    with pytest.raises(InputError) as by_scan:
        scan_inputs.read_texts(f)
    assert words in str(by_text_file.value) and str(by_text_file.value) == str(by_scan.value)
    f = tmp_path / "good.txt"
    f.write_text("one\ntwo\n", encoding="utf-8")
    assert inputs.read_text_file(f) == ("one\ntwo\n", []) and scan_inputs.read_texts(f) == ["one", "two"]
