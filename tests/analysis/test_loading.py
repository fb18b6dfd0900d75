"""Loading a model: its source (bundled, a folder, the hub, cached or not), the device and dtype, download
progress, and contexts shorter than the load's test forward. What a folder must hold: test_checks.py."""
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from analysis.model.devices import available_devices, resolve_device
from analysis.errors import DeviceError, HubUnreachableError, ModelLoadError
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


# ----------------------------------------------------------------------------- contexts shorter than the test forward
@pytest.mark.parametrize("n_positions", [1, 2, 3])
def test_a_context_shorter_than_the_test_forward_loads_and_runs_what_fits(tmp_path, tokenizer, n_positions):
    """The load's 4-token test forward runs no more tokens than the context holds."""
    import copy

    from analysis.run.inference import run_text
    from analysis.model.synthetic import save_random_gpt2

    folder = save_random_gpt2(tmp_path / "m", n_layer=1, n_head=2, d_model=16, n_positions=n_positions,
                              tokenizer=copy.deepcopy(tokenizer))
    loaded = load_model(str(folder), device="cpu")
    result = run_text(loaded, "the cat sat on the mat", bos=False)
    assert loaded.context_length == n_positions and result.n_tokens == n_positions and result.truncated


def test_a_one_position_model_that_prepends_bos_runs_one_token_without_it(tmp_path):
    """A Llama tokenizer puts <s> in front; with one position there is no room for it and a word, so BOS is off
    by default, and asked for it is refused in one sentence that says what to do instead."""
    from analysis.errors import InputError
    from analysis.run.inference import run_text
    from analysis.model.synthetic import save_random_family

    loaded = load_model(str(save_random_family(tmp_path / "m", "llama", n_positions=1)), device="cpu")
    assert not loaded.prepend_bos_default
    assert run_text(loaded, "the cat sat").n_tokens == 1
    with pytest.raises(InputError) as caught:
        run_text(loaded, "the cat sat", bos=True)
    assert str(caught.value) == ("This model's context holds only 1 position, no room for text beside its 1 special "
                                 "token (BOS); run the text without them (--no-bos, or untick BOS).")


def test_an_unknown_bare_name_offline_is_called_unknown_not_only_unreachable(monkeypatch):
    """'nosuch' (no org/) is no name AttnScope knows: offline the hub cannot say whether it exists, so the message says
    both, with near names; a known hub name and an org/name keep the plain "not reachable" advice."""
    import huggingface_hub

    from analysis.model import hub
    from analysis.model.catalogue import resolve_source, unknown_name_note

    def unreachable(*_args, **_kwargs):
        raise ConnectionError("Failed to resolve 'huggingface.co'")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "hub_offline", lambda: False)
    messages = {}
    for name in ("nosuch", "gpt2-larg", "gpt2", "someorg/nosuch"):
        with pytest.raises(HubUnreachableError) as refused:
            hub.download_hub_model(resolve_source(name))
        messages[name] = str(refused.value)
        assert "\n" not in messages[name] and refused.value.source == name
    assert messages["nosuch"].startswith("'nosuch' is not a model AttnScope knows") and "not reachable" in \
        messages["nosuch"] and "Did you mean" not in messages["nosuch"]
    assert "Did you mean gpt2-large" in messages["gpt2-larg"]
    for name in ("gpt2", "someorg/nosuch"):
        assert messages[name].startswith(f"Cannot download '{name}': the Hugging Face hub is not reachable")
        assert unknown_name_note(name) == ""
    monkeypatch.setattr(hub, "hub_offline", lambda: True)
    with pytest.raises(HubUnreachableError) as refused:
        hub.download_hub_model(resolve_source("nosuch"))
    assert str(refused.value).startswith("'nosuch' is not a model") and "HF_HUB_OFFLINE" in str(refused.value)
