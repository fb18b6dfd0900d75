"""``attnscope models``: the GGUF files found, one line each (the path, or why AttnScope cannot open it), the
places looked in on stderr, the same entries as JSON with --json; every place points into tmp_path."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from analysis.model import gguf_scan
from helpers import one_error_line, run_main as run


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    from analysis.model.synthetic_gguf import write_tiny_gguf

    d = tmp_path_factory.mktemp("gguf-cli")
    return (write_tiny_gguf(d / "llama.gguf", "llama", "Q8_0"),
            write_tiny_gguf(d / "lora.gguf", "llama", "F32", extra={"general.type": "adapter"}))


@pytest.fixture
def home(tmp_path, monkeypatch, sources):
    """A home folder with a model in llama.cpp's cache and an adapter in LM Studio's folder."""
    llama, lora = sources
    home = tmp_path / "home"
    (home / ".cache" / "llama.cpp").mkdir(parents=True)
    shutil.copyfile(llama, home / ".cache" / "llama.cpp" / "org_repo_tiny-Q8_0.gguf")
    (home / ".lmstudio" / "models" / "pub" / "repo").mkdir(parents=True)
    shutil.copyfile(lora, home / ".lmstudio" / "models" / "pub" / "repo" / "lora.gguf")
    monkeypatch.setenv(gguf_scan.SCAN_HOME, str(home))
    return home


def test_models_lists_each_file_with_its_path_or_why_it_cannot_be_opened(capsys, home, tmp_path, sources):
    mine = tmp_path / "mine" / "sub"
    mine.mkdir(parents=True)
    shutil.copyfile(sources[0], mine / "copy.gguf")
    target = tmp_path / "out" / "models.json"
    code, out, err = run(capsys, "models", "--folder", tmp_path / "mine", "--json", target)
    assert code == 0, err
    model = home / ".cache" / "llama.cpp" / "org_repo_tiny-Q8_0.gguf"
    size = gguf_scan.short_bytes(os.path.getsize(model))
    lora_size = gguf_scan.short_bytes(os.path.getsize(sources[1]))
    assert out.splitlines() == [
        f"org_repo_tiny-Q8_0.gguf · {size} · Q8_0 · llama.cpp · {model}",
        f"pub/repo/lora.gguf · {lora_size} · F32 · LM Studio · cannot be opened: lora.gguf is a LoRA adapter, not "
        "a model: open the model it adapts (a GGUF of the base model), or a model with the adapter merged in.",
        f"sub/copy.gguf · {size} · Q8_0 · folder · {mine / 'copy.gguf'}",
    ]
    assert err == (f"3 GGUF files, 2 of them can be opened. Looked in: llama.cpp ({home / '.cache' / 'llama.cpp'}); "
                   f"LM Studio ({home / '.lmstudio' / 'models'}); folder ({tmp_path / 'mine'}).\n")
    data = json.loads(target.read_text(encoding="utf-8"))
    assert [(f["name"], f["path"], f["size"], f["quantization"], f["where"], f["problem"] is None)
            for f in data["files"]] == [
        ("org_repo_tiny-Q8_0.gguf", str(model), os.path.getsize(model), "Q8_0", "llama.cpp", True),
        ("pub/repo/lora.gguf", str(home / ".lmstudio/models/pub/repo/lora.gguf"), os.path.getsize(sources[1]), "F32",
         "LM Studio", False),
        ("sub/copy.gguf", str(mine / "copy.gguf"), os.path.getsize(model), "Q8_0", "folder", True)]
    assert [p["where"] for p in data["looked_in"]] == ["llama.cpp", "LM Studio", "folder"]


def test_a_second_run_reads_no_header_again(capsys, home, monkeypatch):
    run(capsys, "models")
    read = []
    original = gguf_scan._read
    monkeypatch.setattr(gguf_scan, "_read", lambda real: read.append(real) or original(real))
    code, out, _ = run(capsys, "models")
    assert code == 0 and len(out.splitlines()) == 2 and read == []


def test_nothing_found_and_a_folder_that_is_not_there_are_said(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_scan.SCAN_HOME, str(tmp_path / "empty-home"))
    code, out, err = run(capsys, "models", "--folder", tmp_path / "nope")
    assert code == 0 and out == ""
    assert err.splitlines() == [
        f"attnscope: warning: {tmp_path / 'nope'} is not a folder: nothing is looked for there.",
        "No GGUF files found. Looked in: none of the usual places exists here."]


def test_bad_options_are_one_sentence(capsys, home, tmp_path):
    code, _, err = run(capsys, "models", "--json", tmp_path)
    assert code == 2 and "folder" in one_error_line(err)
    code, _, err = run(capsys, "models", "--folder", " ")
    assert code == 2 and "needs a folder name" in one_error_line(err)
