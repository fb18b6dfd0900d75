"""Scores over many texts: batched runs equal one-at-a-time runs; mean/std; writers; cancel."""
import csv
import json
import os
import threading
import warnings

import numpy as np
import pytest

from analysis.measures import scan, scan_inputs, scan_speed
from analysis.errors import AnalysisCancelled, InputError
from analysis.measures.head_scores import SCORE_NAMES, all_scores

TEXTS = [
    "The cat sat on the mat because it was tired. The cat sat on the mat.",
    "Hello world",
    "def add(a, b):\n    return a + b",
    "one two three four five six one two three four five six one two",
    "A",
    "The server rejected the request because it was overloaded.",
    "x = [1, 2, 3]; y = [1, 2, 3]",
]


def all_scores_applies(loaded, name):
    from analysis.run.inference import run_text

    return all_scores(run_text(loaded, "Hello world")).applies(name)


def test_batched_scores_equal_one_text_at_a_time(tiny_model):
    from analysis.run.inference import run_text

    result = scan.scan_texts(tiny_model, TEXTS, batch_size=3, bos=True)
    assert result.per_text.shape == (len(TEXTS), len(SCORE_NAMES), tiny_model.n_layer, tiny_model.n_head)
    for k, text in enumerate(TEXTS):
        alone = run_text(tiny_model, text, bos=True)  # the ordinary path: inference's own capture
        expected = all_scores(alone)
        assert result.n_tokens[k] == alone.n_tokens
        for s, name in enumerate(SCORE_NAMES):
            np.testing.assert_allclose(result.per_text[k, s], expected[name], atol=1e-5, equal_nan=True,
                                       err_msg=f"text {k} score {name}")
    assert result.bos and result.tokens == sum(result.n_tokens) and result.tokens_per_second > 0
    assert not result.per_text.flags.writeable and not result.mean.flags.writeable


def test_mean_and_std_skip_texts_without_a_value(tiny_model):
    result = scan.scan_texts(tiny_model, TEXTS, batch_size=2, bos=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's all-NaN slices
        np.testing.assert_allclose(result.mean, np.nanmean(result.per_text, axis=0), rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(result.std, np.nanstd(result.per_text, axis=0), rtol=1e-9, atol=1e-12,
                                   equal_nan=True)
    dup = SCORE_NAMES.index("duplicate_token")
    has_repeat = [len(set(ids)) < len(ids) for ids in
                  (tiny_model.tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS)]
    assert 0 < result.defined[dup] == sum(has_repeat) < len(TEXTS)
    probe = SCORE_NAMES.index("induction_probe")
    np.testing.assert_allclose(result.std[probe], 0, atol=1e-12)  # the probe does not depend on the text
    assert result.mean_scores()["sink"].shape == (tiny_model.n_layer, tiny_model.n_head)
    for name in SCORE_NAMES:  # what the model kind rules out stays "not applicable" in the aggregate
        assert result.mean_scores().applies(name) == all_scores_applies(tiny_model, name)


def test_batch_size_does_not_change_the_numbers(tiny_model):
    one = scan.scan_texts(tiny_model, TEXTS, batch_size=1)
    many = scan.scan_texts(tiny_model, TEXTS, batch_size=16)
    np.testing.assert_allclose(one.per_text, many.per_text, atol=1e-5, equal_nan=True)


def test_batches_respect_size_and_memory():
    lengths = [5, 1, 3, 10, 2]

    def padded(batch):  # 1 byte per n², every text padded to the longest
        return len(batch) * max(batch) ** 2

    assert scan._batches(lengths, 2, padded, 10**9) == [[1, 4], [2, 0], [3]]
    # 99 bytes: lengths 1, 2, 3 pad to 3 (3·9 = 27); adding 5 would take 4·25 = 100;
    # 10 alone (100) exceeds the budget but runs, alone (scan_texts refuses a text the rule refuses first)
    assert scan._batches(lengths, 8, padded, 99) == [[1, 4, 2], [0], [3]]


def test_batch_bytes_counts_the_attention_the_forward_and_the_scoring():
    from analysis.run.memory import attention_memory_bytes

    L, H = 30, 9
    one = scan.batch_bytes(L, H, [2048])
    assert one > attention_memory_bytes(L, H, 2048)  # the forward's tensors and the scoring come on top
    # a long text is scored a layer at a time: the extras are a few layers' worth, not a second copy
    assert one < attention_memory_bytes(L, H, 2048) + 6 * attention_memory_bytes(1, H, 2048)
    assert scan.batch_bytes(L, H, [10, 20]) > attention_memory_bytes(L, H, 10) + attention_memory_bytes(L, H, 20)


def test_progress_max_texts_and_cancel(tiny_model):
    calls = []
    result = scan.scan_texts(tiny_model, TEXTS, batch_size=2, max_texts=5, progress=lambda d, t: calls.append((d, t)))
    assert result.n_texts == 5 and calls[-1] == (5, 5) and len(calls) == 3
    cancel = threading.Event()
    with pytest.raises(AnalysisCancelled):
        scan.scan_texts(tiny_model, TEXTS, batch_size=2, progress=lambda d, t: cancel.set(), cancel=cancel)
    with pytest.raises(InputError, match="Text 2 is empty"):
        scan.scan_texts(tiny_model, ["ok", " "])
    with pytest.raises(InputError):
        scan.scan_texts(tiny_model, [])
    with pytest.raises(InputError):
        scan.scan_texts(tiny_model, TEXTS, batch_size=0)


def test_write_scan(tiny_model, tmp_path):
    from analysis.export.contents import SCAN_FILES, write_scan
    from analysis.export.names import MARKER
    from analysis.measures.lenses import sink_rate_of_scores

    result = scan.scan_texts(tiny_model, TEXTS[:4], batch_size=2)
    written = write_scan(result, tmp_path / "out", sink_epsilon=0.2)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([*SCAN_FILES, MARKER])
    assert sorted(p.name for p in written) == sorted(SCAN_FILES)
    assert [p.name for p in (tmp_path).iterdir()] == ["out"]  # no staging folder left beside it
    L, H = tiny_model.n_layer, tiny_model.n_head
    with open(tmp_path / "out" / "scores_mean.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["layer", "head", *SCORE_NAMES] and len(rows) == 1 + L * H
    assert float(rows[1 + 1 * H + 2][2 + SCORE_NAMES.index("sink")]) == pytest.approx(
        result.mean[SCORE_NAMES.index("sink"), 1, 2], rel=1e-5)
    mean_scores = result.mean_scores()
    assert rows[1][2:] == [mean_scores.text(name, 0, 0) for name in SCORE_NAMES]  # n/a where a score does not apply
    with open(tmp_path / "out" / "scores_per_text.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0][:4] == ["text", "n_tokens", "layer", "head"] and len(rows) == 1 + 4 * L * H
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["texts"] == 4 and summary["tokens"] == sum(result.n_tokens)
    assert summary["tokens_per_second"] == pytest.approx(summary["tokens"] / summary["seconds"])
    sink_means = result.mean[SCORE_NAMES.index("sink")]
    by_hand = float(np.mean([[m > 0.2 for m in row] for row in sink_means]))
    assert summary["sink_epsilon"] == 0.2 and summary["sink_rate"] == pytest.approx(by_hand)
    assert summary["sink_rate"] == sink_rate_of_scores(sink_means, 0.2).rate


def test_the_bundled_sample_set_reads_and_scans(tiny_model):
    from analysis.model.catalogue import PROJECT_ROOT

    texts = scan_inputs.read_texts(PROJECT_ROOT / "resources" / "texts" / "scan_sample.txt")
    assert len(texts) >= 200 and len(set(texts)) == len(texts)
    result = scan.scan_texts(tiny_model, texts, max_texts=20)
    assert result.n_texts == 20


def test_compare_batched_reports_both_speeds(tiny_model):
    lines = ["The cat sat on the mat because it was tired."] * 20
    texts = scan_speed.texts_of_length(tiny_model, lines, 16, 6)
    assert len(texts) == 6
    assert all(14 <= len(tiny_model.tokenizer(t, add_special_tokens=False)["input_ids"]) <= 18 for t in texts)
    report = scan_speed.compare_batched(tiny_model, texts, batch_size=3, repeats=1)
    assert report["texts"] == 6 and report["batch_size"] == 3
    assert report["ratio"] == pytest.approx(report["batched_tokens_per_second"]
                                            / report["one_at_a_time_tokens_per_second"])
    assert report["max_abs_diff"] < 1e-5


# ----------------------------------------------------------------------------- memory: export's rule
LONG = " ".join(["word"] * 300)  # more than the tiny model's 64-token context


def test_a_text_whose_attention_exceeds_the_budget_is_refused_as_export_refuses_it(tiny_model, monkeypatch):
    """A scan keeps every text's maps: its refusal is a run's that keeps them (keep_maps=True)."""
    from analysis.run import inference, memory, tokenize

    n = len(tokenize.tokenize(tiny_model, LONG, True)[0])
    need = memory.attention_memory_bytes(tiny_model.n_layer, tiny_model.n_head, n)
    monkeypatch.setenv(memory.MEMORY_BUDGET_ENV, repr((need - 64) / 2**20))
    with pytest.raises(InputError) as export_refusal:
        inference.run_text(tiny_model, LONG, bos=True, keep_maps=True)
    with pytest.raises(InputError) as scan_refusal:
        scan.scan_texts(tiny_model, ["Hello world", LONG, "A cat"], bos=True)
    assert str(scan_refusal.value) == f"Text 2: {export_refusal.value}"
    assert scan.scan_texts(tiny_model, ["Hello world", "A cat"], bos=True).n_texts == 2  # short texts fit


@pytest.mark.slow
def test_a_scan_holds_no_more_than_the_budget_at_once(tiny_model, monkeypatch):
    import tracemalloc

    from analysis.run import inference, memory

    texts = [" ".join(["word", "cat", "the"] * k) for k in range(3, 24)]  # 9 … 64 tokens
    inference.run_probe(tiny_model)  # cached on the model: not part of the scan's peak
    L, H = tiny_model.n_layer, tiny_model.n_head
    budget = 6 * memory.attention_memory_bytes(L, H, 64)  # the longest text and its extras fit, alone
    unlimited = scan.scan_texts(tiny_model, texts, batch_size=16, bos=True)
    monkeypatch.setenv(memory.MEMORY_BUDGET_ENV, repr(budget / 2**20))
    tracemalloc.start()
    try:
        result = scan.scan_texts(tiny_model, texts, batch_size=16, bos=True)
        _, peak = tracemalloc.get_traced_memory()  # numpy's arrays and every Python object (not torch's tensors)
    finally:
        tracemalloc.stop()
    assert peak <= budget
    np.testing.assert_allclose(result.per_text, unlimited.per_text, atol=1e-5, equal_nan=True)


def test_scoring_a_layer_at_a_time_gives_the_same_scores(monkeypatch):
    rng = np.random.default_rng(0)
    a = np.tril(rng.random((3, 2, 12, 12), dtype=np.float32))
    a /= a.sum(axis=-1, keepdims=True)  # (layer, head, query, key), causal rows summing to 1
    ids = np.array([1, 2, 3, 1, 2, 3, 4, 1, 2, 5, 3, 1])
    probe, windows = rng.random((3, 2)), (4, None, 6)  # sliding windows on layers 0 and 2
    whole = scan.text_scores(a, ids, probe, True, windows)
    monkeypatch.setattr(scan, "SCORE_CHUNK_BYTES", 1)  # a layer at a time
    assert scan._score_layers(3, 2, 12) == 1
    np.testing.assert_array_equal(scan._score_text(a, ids, probe, True, windows), whole)
    np.testing.assert_array_equal(scan._score_text(a, ids, None, True, None), scan.text_scores(a, ids, None, True))


# ----------------------------------------------------------------------------- Cancel while tokenising
def test_cancel_while_tokenizing_stops_at_the_next_text(tiny_model, monkeypatch):
    from analysis.run import tokenize as tokenizing

    cancel, calls, real = threading.Event(), [], tokenizing.tokenize

    def tokenize(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            cancel.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(tokenizing, "tokenize", tokenize)
    with pytest.raises(AnalysisCancelled):
        scan.scan_texts(tiny_model, TEXTS * 10, batch_size=2, cancel=cancel)
    assert len(calls) == 3  # of 70 texts: not one more after the Cancel


# ----------------------------------------------------------------------------- the analysed part
def test_a_cut_text_keeps_the_part_analysed_and_its_length(tiny_model, tmp_path):
    from analysis.export.writers import write_scan_texts_csv
    from analysis.run.inference import run_text

    long_text = "The cat sat on the mat. " * 4000  # 96,000 characters on one line
    result = scan.scan_texts(tiny_model, ["Hello world", long_text], bos=True)
    assert result.chars == (11, len(long_text)) and result.truncated == (False, True)
    part = result.texts[1]
    assert long_text.startswith(part) and len(part) < 400
    ran = run_text(tiny_model, long_text, bos=True).token_ids.tolist()
    assert tiny_model.special_ids(tiny_model.tokenizer(part)["input_ids"], special=True) == ran  # exactly those tokens
    assert result.texts[0] == "Hello world"
    path = write_scan_texts_csv(result, tmp_path / "texts.csv")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["text", "n_tokens", "truncated", "chars", "source", "content"]
    assert rows[2] == ["1", str(len(ran)), "1", str(len(long_text)), "", part]  # texts given as a list: no source
    assert path.stat().st_size < 1000


def test_the_analysed_part_without_offsets_is_the_same(tiny_model, monkeypatch):
    long_text = "A dog barked at the mailman twice, then once more. " * 50
    fast = scan.scan_texts(tiny_model, [long_text], bos=False).texts
    # a tokenizer without offsets (a Python one): the shortest prefix holding the run's tokens
    monkeypatch.setattr(type(tiny_model.tokenizer), "is_fast", property(lambda self: False))
    assert scan.scan_texts(tiny_model, [long_text], bos=False).texts == fast
    assert len(fast[0]) < len(long_text)


def test_the_scan_command_says_what_it_skipped_and_takes_a_token_cap(tiny_model_dir, tmp_path, capsys):
    """``scan --texts DIR`` names the skipped entries on stderr (they were only in summary.json), and
    ``--max-tokens`` caps each text as export's does (the memory refusal tells the user to use it)."""
    from helpers import run_main

    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("the cat sat on the mat and the dog sat on the log", encoding="utf-8")
    os.mkfifo(folder / "pipe.txt")
    code, _, err = run_main(capsys, "scan", "--model", tiny_model_dir, "--texts", folder, "--out", tmp_path / "o",
                            "--max-tokens", "5", "--no-bos")
    assert code == 0, err
    assert f"attnscope: warning: Skipped 1 named pipe in {folder}: pipe.txt" in err
    with (tmp_path / "o" / "texts.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["n_tokens"], r["truncated"]) for r in rows] == [("5", "1")]


def test_the_ablate_command_takes_a_token_cap(tiny_model_dir, tmp_path, capsys):
    from helpers import run_main

    code, out, err = run_main(capsys, "ablate", "--model", tiny_model_dir, "--text",
                              "the cat sat on the mat and the dog sat on the log", "--heads", "0.0",
                              "--max-tokens", "4", "--no-bos")
    assert code == 0, err
    assert json.loads(out)["n_tokens"] == 4 and json.loads(out)["truncated"] is True


# ----------------------------------------------------------------------------- the budget's value
@pytest.mark.parametrize("value", ["inf", "Infinity", "-inf", "1e400", "-1", "-0.5", "nan", "abc"])
def test_a_budget_that_is_not_a_finite_number_of_megabytes_is_refused_in_one_sentence(tiny_model, monkeypatch,
                                                                                        value):
    from analysis.run import memory

    monkeypatch.setenv(memory.MEMORY_BUDGET_ENV, value)
    with pytest.raises(InputError) as refused:
        scan.scan_texts(tiny_model, ["Hello world"])
    assert str(refused.value) == (f"{memory.MEMORY_BUDGET_ENV}={value!r} is not a number of megabytes "
                                  "(0 or more).")


def test_a_budget_too_small_for_one_token_does_not_advise_a_cap_of_0(tiny_model, monkeypatch):
    from analysis.run import inference, memory

    monkeypatch.setenv(memory.MEMORY_BUDGET_ENV, "0")
    with pytest.raises(InputError) as refused:
        inference.run_text(tiny_model, "Hello world", bos=True)
    message = str(refused.value)
    assert "at most 0" not in message and "--max-tokens" not in message
    assert message.endswith(f"this run may use, too small for any text; raise {memory.MEMORY_BUDGET_ENV}.")
    with pytest.raises(InputError, match="too small for any text"):
        scan.scan_texts(tiny_model, ["Hello world"])
    monkeypatch.delenv(memory.MEMORY_BUDGET_ENV)  # the budget was the memory available: no variable to raise
    with pytest.raises(InputError, match=r"^The attention of 1 token would take .*free some memory\.$"):
        memory.check_attention_memory(1, 1, 1, budget=0)


def test_the_truncation_warning_of_one_text_cut_to_1_token_says_1_token_and_the_text(tiny_model):
    result = scan.scan_texts(tiny_model, ["the cat sat on the mat"], bos=False, max_tokens=1)
    assert result.truncation_warning() == (
        "The text was longer than the 1 token a run holds here (the model's context or the token cap) and was cut; "
        "its scores describe only its first 1 token.")


# ----------------------------------------------------------------------------- the analysed part: whole characters
@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny Llama whose SentencePiece-style tokenizer falls back to bytes for what its vocabulary lacks."""
    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family

    return load_model(str(save_random_family(tmp_path_factory.mktemp("llama"), "llama")), device="cpu")


@pytest.mark.parametrize("model, text", [("tiny_model", "日本語のテキスト" * 40), ("llama", "😀🎉👍🏽🇯🇵" * 40)],
                         ids=["byte-level", "byte-fallback"])
def test_the_analysed_part_stops_before_a_character_whose_bytes_go_on_in_a_token_not_run(request, model, text):
    """A character of several bytes split between the last token run and the next: the part held the whole
    character, so it tokenised to more tokens than were run (texts.csv's content one character too long)."""
    from analysis.run.tokenize import tokenize

    loaded = request.getfixturevalue(model)
    result = scan.scan_texts(loaded, [text], bos=False, max_tokens=64)
    part = result.texts[0]
    ids = loaded.tokenizer(part, add_special_tokens=False)["input_ids"]
    assert result.truncated == (True,) and result.n_tokens == (64,)
    assert text.startswith(part) and 0 < len(part) < len(text)
    assert ids == tokenize(loaded, text, False, 64)[0][:len(ids)]  # the part's tokens are the first ones run, ≤ 64
    assert len(loaded.tokenizer(text[:len(part) + 1], add_special_tokens=False)["input_ids"]) > 64  # the next char


def test_the_analysed_part_without_offsets_stops_before_a_split_character_too(tiny_model, monkeypatch):
    text = "日本語のテキスト" * 40
    fast = scan.scan_texts(tiny_model, [text], bos=False, max_tokens=64).texts
    monkeypatch.setattr(type(tiny_model.tokenizer), "is_fast", property(lambda self: False))
    assert scan.scan_texts(tiny_model, [text], bos=False, max_tokens=64).texts == fast


@pytest.mark.slow
def test_a_scan_on_a_decoder_without_a_bos_token_says_none_was_used(tmp_path, tokenizer):
    """Asked for BOS on a model whose tokenizer has none, a scan runs the text alone and its summary says
    ``"bos": false`` (the run's rule, ``inference.bos_used``), not the request it could not follow."""
    from transformers import PreTrainedTokenizerFast

    from analysis.model.loading import load_model
    from analysis.model.synthetic import save_random_family
    from analysis.run.inference import run_text

    no_bos = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer)
    assert no_bos.bos_token is None
    loaded = load_model(str(save_random_family(tmp_path / "llama", "llama", seed=3, tokenizer=no_bos)), device="cpu")
    result = scan.scan_texts(loaded, ["the cat sat", "on the mat"], bos=True)
    assert result.bos is False and result.summary()["bos"] is False
    run = run_text(loaded, "the cat sat", bos=True)
    assert result.n_tokens[0] == run.n_tokens and not run.bos  # the same tokens as a run of the same text
