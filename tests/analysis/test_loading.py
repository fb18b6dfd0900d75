"""Model sources, safety rules and errors a user can act on."""
import json
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from analysis.model.devices import available_devices, resolve_device
from analysis.errors import (DeviceError, HubUnreachableError, ModelCheckError, ModelLoadError, PickleWeightsError,
                             WeightsMismatchError)
from analysis.model.catalogue import resolve_source
from analysis.model.loading import load_model
from conftest import ROOT


def test_sources_are_classified(tiny_model_dir, tmp_path):
    assert resolve_source("bundled").kind == "bundled"
    assert resolve_source(str(tiny_model_dir)).kind == "folder"
    src = resolve_source("gpt2")
    assert src.kind == "hub" and src.repo_ids[0] == "openai-community/gpt2"
    assert resolve_source("someone/gpt2-finetune").kind == "hub"
    with pytest.raises(ModelLoadError, match="not found"):
        resolve_source(str(tmp_path / "nowhere"))
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="is a file"):
        resolve_source(str(tmp_path / "f.txt"))


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="config.json is missing"):
        load_model(str(tmp_path), device="cpu")


def test_corrupt_weights_give_a_message(tiny_model_dir, tmp_path):
    folder = copy_model(tiny_model_dir, tmp_path / "m")
    (folder / "model.safetensors").write_bytes(b"this is not a safetensors file")
    with pytest.raises(ModelLoadError, match="could not be loaded"):
        load_model(str(folder), device="cpu")


def test_truncated_weights_give_a_message(tiny_model_dir, tmp_path):
    folder = copy_model(tiny_model_dir, tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="could not be loaded"):
        load_model(str(folder), device="cpu")


def test_other_architectures_are_not_supported_yet(tiny_model_dir, tmp_path):
    folder = copy_model(tiny_model_dir, tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "t5"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="'t5' is not supported yet") as refused:
        load_model(str(folder), device="cpu")
    assert "gpt2" in str(refused.value) and "llama" in str(refused.value) and "bert" in str(refused.value)


def test_a_config_of_another_family_over_gpt2_weights_is_refused_before_allocating(tiny_model_dir, tmp_path):
    """model_type llama over a GPT-2 file: LlamaConfig's defaults describe a 6-billion-parameter model.
    Refused from the safetensors header and a meta-device skeleton, before a byte of it is allocated."""
    import resource

    folder = copy_model(tiny_model_dir, tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "llama"
    (folder / "config.json").write_text(json.dumps(cfg))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(WeightsMismatchError, match="describes a model of 6,4[0-9,]+ parameters") as refused:
        load_model(str(folder), device="cpu")
    assert "random" in str(refused.value) and time.perf_counter() - started < 20
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 2_000_000  # kB: far below 24 GB


def test_pickle_weights_need_an_explicit_opt_in(tmp_path, tokenizer):
    from analysis.model.synthetic import save_random_gpt2

    folder = save_random_gpt2(tmp_path / "m", tokenizer=tokenizer, safetensors=False)
    assert not (folder / "model.safetensors").exists() and (folder / "pytorch_model.bin").exists()
    with pytest.raises(PickleWeightsError, match="pickle files can run code") as refused:
        load_model(str(folder), device="cpu")
    assert refused.value.source == str(folder)
    message = str(refused.value)
    # the core's sentence names no GUI checkbox and no CLI flag: each front end adds its own way to opt in
    assert "--allow-pickle" not in message and "in the app" not in message and message.endswith("safetensors.")
    assert load_model(str(folder), device="cpu", allow_pickle=True).n_layer == 2


def test_missing_tokenizer(tiny_model_dir, tmp_path):
    folder = copy_model(tiny_model_dir, tmp_path / "m")
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        (folder / name).unlink(missing_ok=True)
    with pytest.raises(ModelLoadError, match="no tokenizer"):
        load_model(str(folder), device="cpu")


def test_devices():
    assert available_devices()[:2] == ["auto", "cpu"]
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in ("cpu", "cuda", "mps")
    with pytest.raises(DeviceError, match="Unknown device"):
        resolve_device("tpu")
    for name in ("cuda:x", "cuda:-1", "cudax", "cuda:"):  # once "not available (built without CUDA)"
        with pytest.raises(DeviceError, match="is not a device name"):
            resolve_device(name)


@pytest.mark.skipif("cuda" in available_devices(), reason="this machine has CUDA")
def test_missing_cuda_is_a_clear_error(tiny_model_dir):
    with pytest.raises(DeviceError, match="'cuda' is not available"):
        load_model(str(tiny_model_dir), device="cuda")
    with pytest.raises(DeviceError, match="'cuda:3'"):
        resolve_device("cuda:3")


def test_half_precision_is_refused_on_cpu(tiny_model_dir):
    with pytest.raises(DeviceError, match="only offered on a GPU"):
        load_model(str(tiny_model_dir), device="cpu", dtype="float16")


def run_isolated(script: str, env_extra: dict) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)


@pytest.mark.slow  # a subprocess each (~2 s)
@pytest.mark.parametrize("offline", ["1", ""])
def test_uncached_hub_model_fails_fast_with_advice(tmp_path, offline):
    """Neither cached nor reachable: a message within seconds (HF_HUB_OFFLINE set, or no network)."""
    script = """
        import time
        from analysis.model.loading import load_model
        from analysis.errors import ModelLoadError
        t = time.time()
        try:
            load_model('gpt2', device='cpu')
        except ModelLoadError as e:
            print(round(time.time() - t, 2)); print(type(e).__name__, e.source, e)
        else:
            print('loaded?!')
    """
    env = {"HF_HOME": str(tmp_path / "hf")}
    if offline:
        env["HF_HUB_OFFLINE"] = offline
    started = time.time()
    out = run_isolated(script, env)
    assert out.returncode == 0, out.stderr[-2000:]
    seconds, message = out.stdout.strip().split("\n", 1)
    if not offline and "not reachable" not in message and "Cannot download" not in message:
        pytest.skip(f"this machine reaches the hub: {message}")
    assert float(seconds) < 15 and time.time() - started < 60
    assert message.startswith("HubUnreachableError gpt2 "), message  # the GUI offers Retry by class
    assert "gpt2" in message and ("go online once" in message.lower() or "Go online once" in message)
    assert "local model folder" in message


@pytest.mark.slow  # a fresh interpreter with its own HF_HOME, importing the GUI: ~15 s
def test_cached_hub_model_loads_offline_from_hf_home(tiny_model_dir, tmp_path):
    """A model in HF_HOME's cache is found without the network (HF_HUB_OFFLINE=1)."""
    snapshot = tmp_path / "hf" / "hub" / "models--openai-community--gpt2" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_model_dir, snapshot)
    refs = tmp_path / "hf" / "hub" / "models--openai-community--gpt2" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("a" * 40)
    script = """
        from analysis.model.hub import is_cached
        from analysis.model.loading import load_model
        assert is_cached('gpt2') and not is_cached('gpt2-xl')
        from gui.app import default_model_choice
        assert default_model_choice() == ('gpt2', False)
        m = load_model('gpt2', device='cpu')
        print(m.source.kind, m.n_layer, m.folder.name)
    """
    out = run_isolated(script, {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["hub", "3", "a" * 40]


def test_download_progress_reports_bytes_and_cancels():
    import threading

    from analysis.model.hub import DownloadCancelled, _progress_tqdm

    seen = []
    cancel = threading.Event()
    bar_class = _progress_tqdm(lambda message, done, total: seen.append((message, done, total)), cancel)
    bar = bar_class(total=1000, unit="B", name="huggingface_hub.snapshot_download", disable=True)
    bar.update(400)
    bar.update(100)
    other = bar_class(total=1000, unit="B", name="huggingface_hub.snapshot_download.transfer")
    other.update(999)  # the transfer bar is not the one reported
    assert seen == [("downloading", 400, 1000), ("downloading", 500, 1000)]
    cancel.set()
    with pytest.raises(DownloadCancelled):
        bar.update(100)
    bar.close()
    other.close()
