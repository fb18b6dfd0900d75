"""The model-folder scanner (analysis/model/gguf_scan.py) on fake Hugging Face cache, llama.cpp, LM Studio and
Ollama layouts and folders a user adds: what each place is named, what is greyed and why, split files, the
header cache, the walk's limits, and that a bad file or folder never raises. Every place points into tmp_path."""
from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from analysis.model import gguf_scan
from analysis.model.gguf_scan import FoundGguf, Place, default_places, folder_places, scan, short_bytes


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, Path]:
    """Small real GGUF files (analysis.model.synthetic_gguf), written once for the module."""
    from analysis.model.synthetic_gguf import write_tiny_gguf

    d = tmp_path_factory.mktemp("gguf-sources")
    files = {"llama": write_tiny_gguf(d / "llama.gguf", "llama", "Q8_0"),
             "qwen2": write_tiny_gguf(d / "qwen2.gguf", "qwen2", "Q4_1", seed=1),
             "adapter": write_tiny_gguf(d / "adapter.gguf", "llama", "F32", extra={"general.type": "adapter"}),
             "projector": write_tiny_gguf(d / "mmproj.gguf", "llama", "F32", extra={"general.type": "mmproj"})}
    files["text"] = d / "notes.gguf"
    files["text"].write_text("not a model\n")
    return files


def put(src: Path, dst: Path, link: bool = False) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if link:
        dst.symlink_to(src)
    else:
        shutil.copyfile(src, dst)
    return dst


def home_places(home: Path, **environ) -> tuple[Place, ...]:
    return default_places(environ, home, system_ollama=None)


def by_name(result) -> dict[str, FoundGguf]:
    return {f.name: f for f in result.files}


def hf_file(cache: Path, repo: str, rev: str, name: str, src: Path, main: bool = True) -> Path:
    """A file as huggingface_hub caches one: the blob, and the snapshot's link to it."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    blob = put(src, folder / "blobs" / f"{abs(hash((repo, name, rev))):x}")
    if main:
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(rev)
    return put(blob, folder / "snapshots" / rev / name, link=True)


def ollama_model(models: Path, name: tuple[str, str, str, str], src: Path | None, layers=()) -> Path | None:
    """An Ollama model: its manifest, and (``src`` given) the blob of its model layer."""
    digest = f"{abs(hash(name)):064x}"[-64:]
    if src is not None:
        put(src, models / "blobs" / f"sha256-{digest}")
    manifest = models / "manifests" / Path(*name)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    model_layer = [{"mediaType": gguf_scan.OLLAMA_MODEL, "digest": f"sha256:{digest}", "size": 1234}]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": list(layers) + (model_layer if src or not layers
                                                                                  else [])}))
    return models / "blobs" / f"sha256-{digest}"


# ----------------------------------------------------------------------------- each place
def test_each_place_is_found_where_its_tool_keeps_it_and_named_as_the_tool_names_it(tmp_path, ggufs):
    home = tmp_path / "home"
    cache = home / ".cache"
    hf_file(cache / "huggingface" / "hub", "bartowski/Tiny-GGUF", "abc123", "tiny-Q8_0.gguf", ggufs["llama"])
    put(ggufs["qwen2"], cache / "llama.cpp" / "org_repo_qwen2-q4_1.gguf")
    put(ggufs["llama"], cache / "llama.cpp" / "sub" / "deeper.gguf")  # llama.cpp's cache is flat
    put(ggufs["qwen2"], home / ".lmstudio" / "models" / "lmstudio-community" / "Qwen-GGUF" / "qwen-Q4_1.gguf")
    put(ggufs["llama"], cache / "lm-studio" / "models" / "TheBloke" / "Old-GGUF" / "old.Q8_0.gguf")
    blob = ollama_model(home / ".ollama" / "models", ("registry.ollama.ai", "library", "llama3.2", "1b"),
                        ggufs["llama"])
    ollama_model(home / ".ollama" / "models", ("hf.co", "bartowski", "Qwen-GGUF", "Q4_1"), ggufs["qwen2"])
    ollama_model(home / ".ollama" / "models", ("registry.ollama.ai", "someone", "tiny", "latest"), ggufs["qwen2"])
    mine = put(ggufs["qwen2"], tmp_path / "mine" / "a" / "b" / "my-qwen.gguf")

    result = scan(home_places(home) + folder_places([tmp_path / "mine"]), cache_file=None)
    found = by_name(result)
    assert {name: (f.where, f.quantization, f.ok) for name, f in found.items()} == {
        "bartowski/Tiny-GGUF/tiny-Q8_0.gguf": ("HF cache", "Q8_0", True),
        "org_repo_qwen2-q4_1.gguf": ("llama.cpp", "Q4_1", True),
        "lmstudio-community/Qwen-GGUF/qwen-Q4_1.gguf": ("LM Studio", "Q4_1", True),
        "TheBloke/Old-GGUF/old.Q8_0.gguf": ("LM Studio", "Q8_0", True),
        "llama3.2:1b": ("Ollama", "Q8_0", True),
        "hf.co/bartowski/Qwen-GGUF:Q4_1": ("Ollama", "Q4_1", True),
        "someone/tiny:latest": ("Ollama", "Q4_1", True),
        "a/b/my-qwen.gguf": ("folder", "Q4_1", True),
    }
    assert [f.where for f in result.files] == ["HF cache", "llama.cpp", "LM Studio", "LM Studio", "Ollama", "Ollama",
                                               "Ollama", "folder"]  # in the order of the places
    assert found["llama3.2:1b"].path == str(blob) and found["a/b/my-qwen.gguf"].path == str(mine)
    hf = found["bartowski/Tiny-GGUF/tiny-Q8_0.gguf"]
    assert hf.path.endswith("snapshots/abc123/tiny-Q8_0.gguf") and Path(hf.path).is_absolute()  # the .gguf name
    for f in result.files:
        assert f.size == os.path.getsize(f.path) and f.title.startswith("tiny ") and f.parts == 1
    assert found["llama3.2:1b"].label == f"llama3.2:1b · {short_bytes(os.path.getsize(blob))} · Q8_0 · Ollama"


def test_environment_variables_move_the_places_and_the_scan_home_replaces_them_all(tmp_path):
    home = tmp_path / "home"
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "hf"), "LLAMA_CACHE": str(tmp_path / "ll"),
           "OLLAMA_MODELS": str(tmp_path / "ol"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    lmstudio = home / ".lmstudio" / "models"
    paths = {(p.where, p.path) for p in default_places(env, home, system_ollama=Path("/sys-ollama"))}
    assert paths == {("HF cache", tmp_path / "hub"), ("llama.cpp", tmp_path / "ll"), ("LM Studio", lmstudio),
                     ("LM Studio", tmp_path / "xdg" / "lm-studio" / "models"), ("Ollama", tmp_path / "ol"),
                     ("Ollama", Path("/sys-ollama"))}
    del env["HF_HUB_CACHE"]
    assert default_places(env, home)[0].path == tmp_path / "hf" / "hub"
    xdg = default_places({"XDG_CACHE_HOME": str(tmp_path / "xdg")}, home)
    assert xdg[0].path == tmp_path / "xdg" / "huggingface" / "hub"
    cache = home / ".cache"
    plain = {(p.where, p.path) for p in default_places({}, home, system_ollama=None)}
    assert plain == {("HF cache", cache / "huggingface" / "hub"), ("llama.cpp", cache / "llama.cpp"),
                     ("LM Studio", lmstudio), ("LM Studio", cache / "lm-studio" / "models"),
                     ("Ollama", home / ".ollama" / "models")}
    scan_home = tmp_path / "scan-home"
    moved = {p.path for p in default_places({**env, gguf_scan.SCAN_HOME: str(scan_home)}, home)}
    assert all(scan_home in p.parents for p in moved) and len(moved) == 5  # no variable, no /usr/share/ollama
    assert all(Path(os.environ[gguf_scan.SCAN_HOME]) in p.path.parents for p in default_places())  # the tests' own


def test_the_system_ollama_folder_is_a_place_of_its_own(tmp_path, ggufs):
    system = tmp_path / "usr-share-ollama"
    ollama_model(system, ("registry.ollama.ai", "library", "qwen2.5", "0.5b"), ggufs["qwen2"])
    result = scan(default_places({}, tmp_path / "home", system_ollama=system), cache_file=None)
    assert [(f.name, f.where) for f in result.files] == [("qwen2.5:0.5b", "Ollama")]


# ----------------------------------------------------------------------------- greyed, and why
def test_files_that_cannot_be_opened_are_listed_with_the_reason(tmp_path, ggufs):
    folder = tmp_path / "models"
    for key in ("adapter", "projector", "text"):
        put(ggufs[key], folder / ggufs[key].name)
    with put(ggufs["llama"], folder / "cut.gguf").open("r+b") as f:
        f.truncate(40)  # ends inside its header
    found = by_name(scan(folder_places([folder]), cache_file=None))
    assert sorted(found) == ["adapter.gguf", "cut.gguf", "mmproj.gguf", "notes.gguf"]
    assert not any(f.ok for f in found.values())
    assert found["adapter.gguf"].problem.startswith("adapter.gguf is a LoRA adapter")
    assert "vision projector" in found["mmproj.gguf"].problem
    assert found["notes.gguf"].problem == "notes.gguf is not a GGUF file (it does not start with 'GGUF')."
    assert "truncated" in found["cut.gguf"].problem and found["cut.gguf"].quantization == ""
    assert found["cut.gguf"].label == "cut.gguf · 40 bytes · folder"  # no quantization to show


def test_ollama_skips_what_is_not_a_model_and_greys_a_missing_blob(tmp_path, ggufs):
    models = tmp_path / "ollama"
    projector = {"mediaType": "application/vnd.ollama.image.projector", "digest": "sha256:" + "1" * 64}
    adapter = {"mediaType": "application/vnd.ollama.image.adapter", "digest": "sha256:" + "2" * 64}
    template = {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "3" * 64}
    ollama_model(models, ("registry.ollama.ai", "library", "llava", "7b"), ggufs["llama"], [projector, template])
    ollama_model(models, ("registry.ollama.ai", "library", "only-adapter", "x"), None, [adapter])  # no model layer
    blob = ollama_model(models, ("registry.ollama.ai", "library", "gone", "1b"), ggufs["llama"])
    blob.unlink()
    ollama_model(models, ("registry.ollama.ai", "library", "lora", "1b"), ggufs["adapter"])
    (models / "manifests" / "registry.ollama.ai" / "library" / "broken").mkdir()
    (models / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest").write_text("{not json")
    (models / "manifests" / "registry.ollama.ai" / "stray-file").write_text("")  # not four levels down
    found = by_name(scan([Place("Ollama", models, "ollama")], cache_file=None))
    assert sorted(found) == ["broken:latest", "gone:1b", "llava:7b", "lora:1b"]
    assert found["llava:7b"].ok and found["llava:7b"].size == os.path.getsize(ggufs["llama"])
    gone = found["gone:1b"]
    assert not gone.ok and "missing from Ollama's folder" in gone.problem and "ollama pull gone:1b" in gone.problem
    assert gone.size == 1234  # what the manifest says it was
    assert found["lora:1b"].problem.startswith("lora:1b is a LoRA adapter")  # named as Ollama names it, not sha256-…
    assert "cannot be read" in found["broken:latest"].problem


def test_two_tags_of_one_ollama_blob_are_both_listed(tmp_path, ggufs):
    models = tmp_path / "ollama"
    blob = ollama_model(models, ("registry.ollama.ai", "library", "llama3.2", "1b"), ggufs["llama"])
    latest = models / "manifests" / "registry.ollama.ai" / "library" / "llama3.2" / "latest"
    shutil.copyfile(latest.with_name("1b"), latest)
    found = scan([Place("Ollama", models, "ollama")], cache_file=None).files
    assert [(f.name, f.path) for f in found] == [("llama3.2:1b", str(blob)), ("llama3.2:latest", str(blob))]


def test_split_files_are_one_greyed_entry_saying_how_to_merge_them(tmp_path, ggufs):
    folder = tmp_path / "split"
    parts = [put(ggufs["llama"], folder / f"big-Q8_0-0000{i}-of-00003.gguf") for i in (1, 2, 3)]
    put(ggufs["qwen2"], folder / "half-00002-of-00002.gguf")  # its first part is not here
    found = by_name(scan(folder_places([folder]), cache_file=None))
    assert sorted(found) == ["big-Q8_0-00001-of-00003.gguf", "half-00002-of-00002.gguf"]
    big = found["big-Q8_0-00001-of-00003.gguf"]
    assert big.path == str(parts[0]) and big.parts == 3 and big.size == sum(os.path.getsize(p) for p in parts)
    assert big.quantization == "Q8_0" and "split GGUF file (3 parts)" in big.problem
    assert "llama-gguf-split --merge" in big.problem
    half = found["half-00002-of-00002.gguf"]
    assert "part 1 not found beside it" in half.problem and half.quantization == "" and half.parts == 1


# ----------------------------------------------------------------------------- one file, once
def test_a_file_seen_through_two_places_or_two_revisions_is_listed_once(tmp_path, ggufs):
    hub = tmp_path / "hub"
    link = hf_file(hub, "org/Model-GGUF", "new", "m.Q8_0.gguf", ggufs["llama"])
    old = hf_file(hub, "org/Model-GGUF", "old", "m.Q8_0.gguf", ggufs["qwen2"], main=False)
    os.utime(old.parent, (1, 1))
    put(link.resolve(), tmp_path / "lmstudio" / "org" / "Model-GGUF" / "m.Q8_0.gguf", link=True)  # LM Studio's link
    result = scan([Place("HF cache", hub, "hf"), Place("LM Studio", tmp_path / "lmstudio", depth=3),
                   *folder_places([tmp_path / "lmstudio"])], cache_file=None)  # the folder holds the link again
    assert [(f.name, f.where, f.quantization) for f in result.files] == [
        ("org/Model-GGUF/m.Q8_0.gguf", "HF cache", "Q8_0")]  # refs/main's revision, once
    assert "snapshots/new/" in result.files[0].path
    (hub / "models--org--Model-GGUF" / "refs" / "main").unlink()  # no refs/main: the newest snapshot
    os.utime(old.parent, (2**31, 2**31))
    (found,) = scan([Place("HF cache", hub, "hf")], cache_file=None).files
    assert "snapshots/old/" in found.path and found.quantization == "Q4_1"


# ----------------------------------------------------------------------------- the header cache
def test_a_rescan_reads_only_new_or_changed_headers(tmp_path, ggufs, monkeypatch):
    folder, cache = tmp_path / "models", tmp_path / "cache" / "gguf-files.json"
    a = put(ggufs["llama"], folder / "a.gguf")
    put(ggufs["adapter"], folder / "b.gguf")
    places = folder_places([folder])
    first = scan(places, cache_file=cache)
    assert first.read == 2 and cache.is_file()
    written = cache.stat().st_mtime_ns
    os.utime(cache, ns=(written - 10**9, written - 10**9))
    again = scan(places, cache_file=cache)
    assert again.read == 0 and again.files == first.files  # the problems and names come back the same
    assert cache.stat().st_mtime_ns == written - 10**9  # nothing new: not written again
    read = []
    original = gguf_scan._read
    monkeypatch.setattr(gguf_scan, "_read", lambda real: read.append(real.name) or original(real))
    put(ggufs["qwen2"], folder / "c.gguf")
    shutil.copyfile(ggufs["qwen2"], a)  # a changed file (its size and time)
    changed = by_name(scan(places, cache_file=cache))
    assert sorted(read) == ["a.gguf", "c.gguf"] and changed["a.gguf"].quantization == "Q4_1"
    os.utime(a, ns=(1, 1))  # the same size, another time: read again
    read.clear()
    scan(places, cache_file=cache)
    assert read == ["a.gguf"]
    (folder / "b.gguf").unlink()
    scan(places, cache_file=cache)
    assert not any(k.endswith("b.gguf") for k in json.loads(cache.read_text())["files"])  # gone from disk: forgotten


def test_the_cache_is_dropped_when_the_reader_changes_and_a_bad_cache_is_read_again(tmp_path, ggufs, monkeypatch):
    folder, cache = tmp_path / "models", tmp_path / "gguf-files.json"
    put(ggufs["llama"], folder / "a.gguf")
    places = folder_places([folder])
    scan(places, cache_file=cache)
    monkeypatch.setattr(gguf_scan, "CACHE_FORMAT", gguf_scan.CACHE_FORMAT + 1)
    assert scan(places, cache_file=cache).read == 1
    for bad in ("{not json", "[]", json.dumps({"reader": gguf_scan._reader_stamp(), "files": {"x": 1}}),
                json.dumps({"reader": gguf_scan._reader_stamp(), "files": {str((folder / "a.gguf").resolve()): {
                    "size": os.path.getsize(folder / "a.gguf"), "mtime_ns": (folder / "a.gguf").stat().st_mtime_ns}}})):
        cache.write_text(bad)
        result = scan(places, cache_file=cache)
        assert result.read == 1 and result.files[0].quantization == "Q8_0"


def test_the_default_cache_is_in_the_user_cache_folder_and_an_unwritable_one_is_no_error(tmp_path, ggufs):
    from analysis.model.user_cache import user_cache_dir

    put(ggufs["llama"], tmp_path / "models" / "a.gguf")
    places = folder_places([tmp_path / "models"])
    scan(places)
    assert (user_cache_dir() / "gguf-files.json").is_file()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = scan(places, cache_file=blocker / "gguf-files.json")  # its folder is a file: nothing is written
    assert result.read == 1 and result.files[0].ok and blocker.read_text() == ""
    assert not list(tmp_path.glob(".*.tmp"))


# ----------------------------------------------------------------------------- the walk and its limits
def test_the_walk_survives_link_loops_unreadable_folders_and_stops_at_its_limits(tmp_path, ggufs, monkeypatch):
    root = tmp_path / "root"
    put(ggufs["llama"], root / "top.gguf")
    (root / "loop").mkdir()
    (root / "loop" / "back").symlink_to(root)  # a link loop
    (root / "dangling.gguf").symlink_to(tmp_path / "nothing")
    put(ggufs["llama"], root / ".hidden" / "skipped.gguf")
    put(ggufs["llama"], root / "._top.gguf")
    put(ggufs["llama"], root / "locked" / "x.gguf")
    deep = root / Path(*["d"] * (gguf_scan.MAX_DEPTH + 1))
    put(ggufs["llama"], deep / "too-deep.gguf")
    put(ggufs["llama"], deep.parent / "deep-enough.gguf")
    (root / "upper.GGUF").write_bytes(ggufs["llama"].read_bytes())
    real_scandir = os.scandir

    def scandir(path):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(gguf_scan.os, "scandir", scandir)
    found = [f.name for f in scan(folder_places([root]), cache_file=None).files]
    assert found == [f"{'/'.join(['d'] * gguf_scan.MAX_DEPTH)}/deep-enough.gguf", "top.gguf", "upper.GGUF"]
    monkeypatch.setattr(gguf_scan, "MAX_FILES", 1)
    assert len(scan(folder_places([root]), cache_file=None).files) == 1
    monkeypatch.setattr(gguf_scan, "MAX_FILES", 2_000)
    monkeypatch.setattr(gguf_scan, "MAX_ENTRIES", 3)  # root's first entries only
    assert [f.name for f in scan(folder_places([root]), cache_file=None).files] == []


def test_bad_places_are_skipped_and_a_cancelled_scan_stops(tmp_path, ggufs):
    (tmp_path / "a-file").write_text("")
    put(ggufs["llama"], tmp_path / "ok" / "a.gguf")
    places = (Place("folder", tmp_path / "a-file"), Place("folder", tmp_path / "missing"),
              Place("HF cache", tmp_path / "ok", "hf"), Place("Ollama", tmp_path / "ok", "ollama"),
              *folder_places([tmp_path / "ok", "", "  "]))
    result = scan(places, cache_file=None)
    assert [f.name for f in result.files] == ["a.gguf"]
    assert [p.path for p in result.looked_in] == [tmp_path / "ok"] * 3
    cancel = threading.Event()
    cancel.set()
    assert scan(places, cache_file=None, cancel=cancel).files == ()


def test_a_reader_bug_greys_that_file_only(tmp_path, ggufs, monkeypatch):
    import analysis.model.gguf_file as gguf_file

    put(ggufs["llama"], tmp_path / "m" / "a.gguf")
    monkeypatch.setattr(gguf_file, "inspect_gguf", lambda path: 1 / 0)
    (found,) = scan(folder_places([tmp_path / "m"]), cache_file=None).files
    assert found.problem == "a.gguf cannot be read (ZeroDivisionError)."


# ----------------------------------------------------------------------------- sizes
@pytest.mark.parametrize("n", [0, 1, 512, 1023, 1024, 46_285, 1024 * 999, 1024 * 1000 - 1, 1024 ** 2 * 808,
                               1_300_000_000, 1024 ** 3 * 99.96, 1024 ** 3 * 123.4, 1024 ** 4 * 2])
def test_short_bytes_has_three_significant_digits_in_binary_units(n):
    n = int(n)
    text = short_bytes(n)
    number, unit = text.rsplit(" ", 1)
    factor = {"bytes": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}[unit]
    value = float(number.replace(",", ""))
    if unit == "bytes":
        assert value == n and n < 1024
    else:
        assert 999.5 / 1024 <= value < 999.5  # a value that would round to 1,000 is in the next unit
        decimals = len(number.split(".")[1]) if "." in number else 0
        assert abs(value * factor - n) <= 0.5 * 10 ** -decimals * factor  # ± half the last digit shown
        assert len(number.replace(".", "").lstrip("0")) == 3
