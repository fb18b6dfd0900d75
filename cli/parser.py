"""The command line's grammar: ``attnscope [model options] [COMMAND] …``, with one-line parse errors."""
from __future__ import annotations

import argparse
import sys

from .arguments import (BENCH_MAX_N, add_bos, add_chat, add_max_tokens, add_model_options, add_sink_epsilon,
                        bench_models, bench_ns, export_heads, export_megabytes, file_name, head_list, out_folder,
                        path_option, positive_int, real_bench_ns, select_spec, text_file)
from .inputs import TEXT_FILE_LIMIT

HEADLESS_DEFAULT_MODEL = "bundled"  # export, scan and ablate without --model


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



def add_one_text(p, what: str = "run") -> None:
    """A command on one text: --text or --text-file, --json FILE, and the token cap, BOS and chat options."""
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--text")
    source.add_argument("--text-file", type=text_file,
                        help=f"read the text from a UTF-8 file (at most {TEXT_FILE_LIMIT // 2**20} MiB)")
    p.add_argument("--json", type=file_name, metavar="FILE", help="also write the JSON to FILE")
    add_max_tokens(p, what)
    add_bos(p)
    add_chat(p, main_parser=False)

def build_parser() -> argparse.ArgumentParser:
    from analysis.export.formats import IMAGE_FORMATS
    from analysis.export.layout import DEFAULT_MAX_EXPORT_MB

    parser = Parser(
        prog="attnscope", description="Look inside the attention of GPT-2, Llama-style, GPT-NeoX and BERT-style models.")
    add_model_options(parser, main_parser=True)
    launch_text = parser.add_mutually_exclusive_group()
    launch_text.add_argument("--text", help="text to run as soon as the model is loaded")
    launch_text.add_argument("--text-file", type=text_file, help="the same, read from a UTF-8 file (at most "
                             f"{TEXT_FILE_LIMIT // 2**20} MiB)")
    parser.add_argument("--select", metavar="L.H", type=select_spec,
                        help="select layer L, head H: 3.1 or L3H1 (as the app names heads)")
    parser.add_argument("--max-tokens", type=positive_int, default=None, metavar="N",
                        help="analyse at most N tokens of a text in this session, as Run → Token limit… does but "
                             "not saved (default: that saved cap, 2048 until set; the model's context if shorter)")
    add_chat(parser, main_parser=True)
    parser.add_argument("--screenshot", metavar="DIR", type=path_option(),
                        help="save screenshots of the main views into DIR once painted, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    export = sub.add_parser("export", help="run a text and write attention, scores, parity and figures")
    add_model_options(export, main_parser=False)
    source = export.add_mutually_exclusive_group(required=True)
    source.add_argument("--text")
    source.add_argument("--text-file", type=text_file, help=f"read the text from a UTF-8 file (at most {TEXT_FILE_LIMIT // 2**20} MiB)")
    export.add_argument("--out", type=out_folder, required=True,
                        help="output folder: new, empty, or an earlier AttnScope export (replaced as a whole)")
    export.add_argument("--format", default=IMAGE_FORMATS[0], choices=IMAGE_FORMATS, help="image format")
    add_bos(export)
    add_chat(export, main_parser=False)
    export.add_argument("--no-head-images", action="store_true", help="write grid image only, not one per head")
    export.add_argument("--max-export-mb", type=export_megabytes, default=DEFAULT_MAX_EXPORT_MB, metavar="MB",
                        help="attention.npz holds every head's maps, value norms and rollout, each when it takes at "
                             f"most MB MiB (default {DEFAULT_MAX_EXPORT_MB}); summary.json says what was left out, "
                             "and head images are drawn for every head only when the maps fit")
    export.add_argument("--heads", metavar="L.H,…", type=export_heads,
                        help="also write these heads' whole maps and value norms (head_maps, head_value_norms, "
                             "head_index) and their layers' rollout into attention.npz, and draw their images, "
                             "e.g. 3.1,5.0 or L3H1,L5H0")
    export.add_argument("--all-maps", action="store_true",
                        help="write every head's maps, value norms and rollout as .npy files (attentions.npy, "
                             "value_norms.npy, rollout.npy; np.load(…, mmap_mode='r')), streamed to disk, after "
                             "checking the free space")
    export.add_argument("--rollout-skip-first", action="store_true",
                        help="write rollout with the first input token hidden and each row renormalised: "
                             "R[i, j] / (1 − R[i, 0]) for j ≥ 1, NaN at j = 0 (as the Rollout tab's Hide first "
                             "token, renormalise); summary.json's rollout_skip_first says which was written")
    export.add_argument("--parity-dtype", default="float32", choices=("float32", "float64"))
    add_max_tokens(export)
    add_sink_epsilon(export)
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
    add_model_options(scan, main_parser=False)
    scan.add_argument("--texts", default="sample", type=path_option(keep=("sample",), convert=str),
                      help="a UTF-8 file (one text per line), a folder of .txt files (one text each), or 'sample': "
                           "the bundled set of a few hundred sentences (the default)")
    scan.add_argument("--out", type=out_folder, required=True,
                      help="output folder: new, empty, or an earlier AttnScope folder (replaced as a whole)")
    scan.add_argument("--max-texts", type=positive_int, metavar="N", help="scan only the first N texts")
    scan.add_argument("--batch", type=positive_int, default=16, metavar="B",
                      help="texts per forward pass (padded together; default 16)")
    add_max_tokens(scan)
    add_bos(scan)
    add_chat(scan, main_parser=False, what="each text")
    add_sink_epsilon(scan)

    ablate = sub.add_parser("ablate", help="the next-token loss and top-5 with heads ablated (decoders), as JSON")
    add_model_options(ablate, main_parser=False)
    source = ablate.add_mutually_exclusive_group(required=True)
    source.add_argument("--text")
    source.add_argument("--text-file", type=text_file,
                        help=f"read the text from a UTF-8 file (at most {TEXT_FILE_LIMIT // 2**20} MiB)")
    ablate.add_argument("--heads", metavar="L.H,…", type=head_list,
                        help="the heads to ablate together, e.g. 1.0,1.3 or L1H0,L1H3 (each once)")
    ablate.add_argument("--mode", default="zero", choices=("zero", "mean"),
                        help="zero: the head writes nothing; mean: its output averaged over the text's positions")
    ablate.add_argument("--importance", action="store_true",
                        help="also ablate each head alone (its later layers re-run from the cached residual stream) and list the heads that matter most")
    ablate.add_argument("--json", type=file_name, metavar="FILE", help="also write the JSON to FILE")
    add_max_tokens(ablate, "run")
    add_bos(ablate)
    add_chat(ablate, main_parser=False)

    attribute = sub.add_parser("attribute", help="direct logit attribution: what each head, MLP, the embeddings and "
                                                 "biases add to the answer's logit (difference) at one position, as JSON")
    add_model_options(attribute, main_parser=False)
    add_one_text(attribute)
    attribute.add_argument("--answer", required=True, metavar="TOKEN",
                           help="the answer token as it is written after the text, leading space included (\" Mary\")")
    attribute.add_argument("--wrong", metavar="TOKEN", help="a wrong answer: the metric is logit(answer) − logit(wrong)")
    attribute.add_argument("--position", type=int, metavar="P", help="the position read (default the last; −1 the last)")

    patch = sub.add_parser("patch", help="activation patching: put one activation of a clean prompt's run into a "
                                         "corrupted one's (or the reverse) and map how much of the metric it restores, "
                                         "as JSON")
    add_model_options(patch, main_parser=False)
    patch.add_argument("--clean", required=True, help="the clean prompt, e.g. 'When Mary and John went to the store, "
                                                     "John gave a drink to'")
    patch.add_argument("--corrupted", required=True, help="the corrupted prompt, as many tokens (e.g. '… Mary gave …')")
    patch.add_argument("--answer", metavar="TOKEN", help="the clean answer as written after the prompt (\" Mary\")")
    patch.add_argument("--wrong", metavar="TOKEN", help="the corrupted answer (\" John\"): logit_diff reads "
                                                         "logit(answer) − logit(wrong)")
    patch.add_argument("--metric", default="logit_diff", choices=("logit_diff", "logprob", "loss"),
                       help="logit_diff (default), logprob: log p(answer), or loss: −(the clean text's mean loss)")
    patch.add_argument("--what", default="heads", choices=("heads", "head_positions", "resid", "layers"),
                       help="heads: each head's output at every position (default); head_positions: at each position; "
                            "resid: the residual stream per layer and position; layers: attention and MLP outputs")
    patch.add_argument("--noising", action="store_true",
                       help="run the clean prompt with corrupted activations (default: denoising, the reverse)")
    patch.add_argument("--position", type=int, metavar="P", help="the position read (default the last)")
    patch.add_argument("--json", type=file_name, metavar="FILE", help="also write the JSON to FILE")
    add_max_tokens(patch, "run")
    add_bos(patch)
    add_chat(patch, main_parser=False)

    lens = sub.add_parser("lens", help="the logit lens: each layer's residual stream decoded through the final norm "
                                       "and the unembedding at every position, and each next token's surprisal, as JSON")
    add_model_options(lens, main_parser=False)
    add_one_text(lens)

    compose = sub.add_parser("compose", help="head composition (Elhage et al. 2021): Q-, K- and V-composition scores "
                                             "between every earlier and later head, from weights, as JSON")
    add_model_options(compose, main_parser=False)
    compose.add_argument("--top", type=positive_int, default=10, metavar="K", help="the K strongest pairs of each kind")
    compose.add_argument("--json", type=file_name, metavar="FILE",
                         help="also write every score (layer × head × layer × head per kind) to FILE")

    models = sub.add_parser("models", help="list the GGUF files already on this computer (Hugging Face cache, "
                                           "llama.cpp, LM Studio, Ollama) and whether AttnScope can open each")
    models.add_argument("--folder", action="append", metavar="DIR", type=path_option(blank="a folder name"),
                        help="also look in DIR and the folders under it (repeatable)")
    models.add_argument("--json", type=file_name, metavar="FILE", help="also write the list to FILE as JSON")

    from .figure import add_figure_parser

    add_figure_parser(sub, add_model_options, add_bos)

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
    bench.add_argument("--real", action="store_true",
                       help="the real model's table: SmolLM2-135M (make smollm2) at 512, 2,048 and 8,192 tokens against "
                            "its bare sdpa forward, with export and peak memory (~15 minutes here); alone unless "
                            "--models is given")
    bench.add_argument("--no-importance", action="store_true",
                       help="with --real: skip the importance map's cached/batched vs one-forward-per-head ratio (~1 min)")
    bench.add_argument("--real-ns", type=real_bench_ns, metavar="NS",
                       help="comma-separated token counts for --real (default 512,2048,8192)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the model options the same before or after the command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "chat", False) and getattr(args, "bos", None) is not None:
        parser.error(f"--chat takes the special tokens from the model's chat template: drop "
                     f"{'--bos' if args.bos else '--no-bos'}", f"{parser.prog} {args.command}" if args.command else None)
    if args.command in ("export", "scan", "ablate", "attribute", "patch", "lens", "compose", "figure") and args.model is None:
        args.model = HEADLESS_DEFAULT_MODEL
    return args
