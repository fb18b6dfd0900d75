"""Property-based checks (hypothesis) over what users can type: texts through the whole pipeline,
matrices through the attention calculator, and paths through the commands.

Invariants: nothing raises but AttnScope's own errors (each a sentence for the user); every row of
attention weights sums to 1; every exported file is complete and loads; a failed export writes
nothing; no command's output can be one of its inputs, however the path is spelled (relative, ``..``,
a link, a hard link, the folder itself or one above it). Derandomised (the same examples on every run)
and bounded to well under a minute.
"""
import csv
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

# hypothesis caches Unicode tables on disk: keep them out of the checkout
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "attnscope-hypothesis"))

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from analysis.errors import AttnScopeError  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# any code point, surrogates included (what a non-UTF-8 command line argument turns into), control
# characters and invisible ones weighted up; lengths from empty to far past the tiny model's context
CHARS = st.one_of(st.characters(), st.characters(codec=None, categories=["Cc", "Cf", "Zs", "Zl", "Zp", "Cs"]),
                  st.sampled_from(list("\x00\ufeff\u200b\n\r\t ")))
TEXTS = st.one_of(st.text(CHARS, max_size=40), st.text(CHARS, min_size=150, max_size=600),
                  st.builds(lambda t, n: t * n, st.text(CHARS, min_size=1, max_size=12), st.integers(20, 200)))


@pytest.fixture(scope="module")
def parameters(tiny_model):
    return [tiny_model.attention_weights(l) for l in range(tiny_model.n_layer)]


def check_export(out: Path, result) -> None:
    """Every file of the export is complete: it parses, and holds what the result holds."""
    with np.load(out / "attention.npz") as data:
        np.testing.assert_array_equal(data["attentions"], result.attentions)
        assert list(data["tokens"]) == list(result.tokens) and all(data["tokens"])
        np.testing.assert_array_equal(data["token_ids"], result.token_ids)
    with (out / "scores.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert len(rows) == 1 + result.n_layer * result.n_head
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["n_tokens"] == result.n_tokens and summary["generator"] == "attnscope"
    parity = json.loads((out / "parity.json").read_text(encoding="utf-8"))
    assert parity["passed"] is True
    marker = json.loads((out / ".attnscope-export.json").read_text(encoding="utf-8"))
    assert sorted(marker["files"]) == ["attention.npz", "parity.json", "scores.csv", "scores_tl.csv", "summary.json"]


@pytest.mark.slow  # ~15 s: in `make test` and CI, not in the quick loop
@settings(FUZZ, max_examples=150)
@given(text=TEXTS, bos=st.booleans())
def test_any_text_through_tokenize_run_scores_export(tiny_model, parameters, text, bos):
    from analysis.export.contents import ExportContents, write_export
    from analysis.measures.head_scores import all_scores
    from analysis.run.inference import run_text
    from analysis.measures.parity import parity_report

    parent = Path(tempfile.mkdtemp(prefix="attnscope-fuzz-"))
    out = parent / "export"
    try:
        try:
            result = run_text(tiny_model, text, bos=bos, with_probe=False)
            scores = all_scores(result)
            parity = parity_report(result, parameters)
            write_export(out, ExportContents(result, scores, parity))
        except AttnScopeError as exc:
            message = str(exc)
            assert message and "\n" not in message
            assert not out.exists() and sorted(p.name for p in parent.iterdir()) == []  # nothing written
            return
        assert 1 <= result.n_tokens <= tiny_model.context_length
        np.testing.assert_allclose(result.attentions.sum(axis=-1), 1.0, atol=1e-5)
        assert result.truncated == (result.n_tokens_text > result.n_tokens - int(result.bos))
        check_export(out, result)
        assert sorted(p.name for p in parent.iterdir()) == ["export"]  # no staging folder left
    finally:
        shutil.rmtree(parent, ignore_errors=True)


FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def matrices(draw):
    n_q, n_k, d_k, d_v = (draw(st.integers(1, 4)) for _ in range(4))
    elements = st.one_of(FINITE, st.floats(-10, 10))  # extremes and ordinary numbers
    q = draw(hnp.arrays(np.float64, (n_q, d_k), elements=elements))
    k = draw(hnp.arrays(np.float64, (n_k, d_k), elements=elements))
    v = draw(hnp.arrays(np.float64, (n_k, d_v), elements=elements))
    return q, k, v


@pytest.mark.slow
@settings(FUZZ, max_examples=200)
@given(qkv=matrices(), causal=st.booleans(), as_json=st.booleans())
def test_any_finite_matrices_through_the_calculator(qkv, causal, as_json):
    from analysis.lessons.calculator import attend, parse_matrix

    q, k, v = qkv
    try:
        if as_json:  # the command line's and the app's route: JSON text in
            q, k, v = (parse_matrix(json.dumps(m.tolist()), name) for m, name in ((q, "Q"), (k, "K"), (v, "V")))
        r = attend(q, k, v, causal=causal)
    except AttnScopeError as exc:
        assert causal and q.shape[0] > k.shape[0], exc  # the one refusal finite input can meet
        return
    assert np.isfinite(r.weights).all() and (r.weights >= 0).all()
    np.testing.assert_allclose(r.weights.sum(axis=-1), 1.0, atol=1e-12)
    assert np.isfinite(r.output).all()
    m = max(float(np.abs(v).max()), 1e-300)  # compare in units of max|V|: no overflow in the test itself
    lo, hi, out = v.min(axis=0) / m, v.max(axis=0) / m, r.output / m
    assert (out >= lo - 1e-9).all() and (out <= hi + 1e-9).all()  # a convex mixture of V's rows
    if causal:
        offset = k.shape[0] - q.shape[0]
        for i in range(q.shape[0]):
            assert (r.weights[i, i + offset + 1:] == 0).all()
    json.dumps(r.to_dict(), allow_nan=False)  # valid JSON, always


# ----------------------------------------------------------------------------- no output is ever an input
# A sandbox: work/ is the current folder; notes.txt is a --text-file, in/texts/ and in/lines.txt are --texts,
# models/m/ is a --model folder. Each example aims one command's output at one of its inputs (or a folder
# above it), spelled one way, and the command must refuse with the one sentence, before the model loads,
# with nothing on disk changed.
INPUTS = {"ablate": ("notes.txt", "models/m/config.json"), "export": ("notes.txt", "models/m"),
          "scan": ("in/texts", "in/lines.txt", "models/m")}
SPELLINGS = ("absolute", "relative", "dotdot", "symlink", "dirlink", "hardlink")


def _sandbox(root: Path) -> Path:
    work = root / "work"
    for folder in ("in/texts", "models/m", "links"):
        (work / folder).mkdir(parents=True)
    (work / "notes.txt").write_text("The cat sat on the mat.\n", encoding="utf-8")
    (work / "in" / "lines.txt").write_text("one\ntwo\n", encoding="utf-8")
    for name in ("a.txt", "b.txt"):
        (work / "in" / "texts" / name).write_text(f"text {name}", encoding="utf-8")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (work / "models" / "m" / name).write_text("{}", encoding="utf-8")
    return work


def _tree(root: Path) -> dict:
    """Everything under ``root``: files with their bytes, links with their targets, folders."""
    seen = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        seen[rel] = ("link", os.readlink(path)) if path.is_symlink() else \
            ("file", path.read_bytes()) if path.is_file() else ("folder", None)
    return seen


def _spell(target: Path, work: Path, spelling: str, folder_output: bool, aimed: Path) -> str:
    """``target`` (a path inside ``work``) written one way; links are made in work/links/. A hard link is
    one of the ``aimed`` input's files under another name (as an output folder, a folder holding it)."""
    rel = os.path.relpath(target, work)
    if spelling == "absolute":
        return str(target)
    if spelling == "relative":
        return rel
    if spelling == "dotdot":
        return f"models/../{rel}"
    if spelling == "symlink":
        (work / "links" / "to").symlink_to(target)
        return "links/to"
    if spelling == "dirlink":
        (work / "links" / "up").symlink_to(target.parent)
        return f"links/up/{target.name}"
    files = [aimed] if aimed.is_file() else sorted(p for p in aimed.rglob("*") if p.is_file())
    if folder_output:
        (work / "links" / "box").mkdir()
        os.link(files[0], work / "links" / "box" / "copy")
        return "links/box"
    os.link(files[0], work / "links" / "copy")
    return "links/copy"


@pytest.mark.slow  # ~3 s
@settings(FUZZ, max_examples=150)
@given(command=st.sampled_from(sorted(INPUTS)), data=st.data(), spelling=st.sampled_from(SPELLINGS),
       up=st.integers(0, 3), input_spelling=st.sampled_from(("relative", "absolute", "dotdot")))
def test_no_command_can_write_over_its_inputs_however_spelled(command, data, spelling, up, input_spelling):
    import contextlib
    import io
    from unittest import mock

    import analysis.model.loading
    import main

    aimed = data.draw(st.sampled_from(INPUTS[command]), label="aimed at")
    root = Path(tempfile.mkdtemp(prefix="attnscope-apart-"))
    here = os.getcwd()
    try:
        work = _sandbox(root)
        os.chdir(work)
        target = work / aimed
        if command != "ablate":  # an output folder: the input itself, or a folder above it (up to the sandbox)
            for _ in range(up):
                target = target.parent if target != root else target
        inputs = {"ablate": ["--model", "models/m", "--text-file", "notes.txt", "--heads", "0.0"],
                  "export": ["--model", "models/m", "--text-file", "notes.txt"],
                  "scan": ["--model", "models/m", "--texts", aimed if aimed != "models/m" else "in/texts"]}[command]

        def respell(value: str) -> str:  # the inputs' own spelling
            if value.startswith("--") or not (work / value).exists() or input_spelling == "relative":
                return value
            return str(work / value) if input_spelling == "absolute" else f"in/../{value}"

        inputs = [respell(value) for value in inputs]
        before = _tree(root)
        output = _spell(target, work, spelling, folder_output=command != "ablate", aimed=work / aimed)
        made = _tree(root)  # the links made for the spelling are part of what must stay
        argv = [command, *inputs, "--json" if command == "ablate" else "--out", output]
        err = io.StringIO()
        refuse = mock.Mock(side_effect=AssertionError("the model was loaded"))
        with mock.patch.object(analysis.model.loading, "load_model", refuse), contextlib.redirect_stderr(err), \
                contextlib.redirect_stdout(io.StringIO()) as out:
            try:
                code = main.main(argv)
            except SystemExit as exc:
                code = exc.code
        lines = err.getvalue().splitlines()
        assert code == 2 and out.getvalue() == "" and not refuse.called, (argv, err.getvalue())
        assert len(lines) == 1 and lines[0].startswith("attnscope: error: "), lines
        assert any(words in lines[0] for words in ("never writes over what it reads", "an export there would delete",
                                                   "never replaces what it reads")), (argv, lines[0])
        assert _tree(root) == made and {k: v for k, v in made.items() if k in before} == before
    finally:
        os.chdir(here)
        shutil.rmtree(root, ignore_errors=True)
