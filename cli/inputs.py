"""What export, scan and ablate read before the slow part: ``--text-file`` (bounded), and the one check
that no output of a command is, or holds, one of its inputs."""
from __future__ import annotations

from pathlib import Path

#: ``--text-file`` reads at most this much: far more than any context holds (GPT-2's 1024 tokens are
#: a few kB of text), little enough that /dev/zero or a huge log cannot exhaust memory.
TEXT_FILE_LIMIT = 4 * 2**20


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


def _model_folder(model: str | None) -> Path | None:
    """The folder ``--model`` would be read from (bundled, minilm, a folder, a hub model in the local cache),
    or None (a hub model not cached, a name that is no model: loading says why)."""
    from analysis.errors import ModelLoadError
    from analysis.model.catalogue import resolve_source
    from analysis.model.hub import cached_hub_folder

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
        from analysis.measures.scan_inputs import SAMPLE_TEXTS

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


def load_model_of(args):
    """The model the command's options name (``--model``, ``--device``, ``--dtype``, ``--allow-pickle``,
    ``--device-map``, ``--max-memory``), loaded with the terminal's progress line."""
    from analysis.model.device_map import parse_max_memory
    from analysis.model.loading import load_model

    from .output import terminal_progress

    return load_model(args.model, device=args.device, dtype=args.dtype, allow_pickle=args.allow_pickle,
                      progress=terminal_progress(), device_map=args.device_map,
                      max_memory=parse_max_memory(args.max_memory))


def one_text(args) -> str:
    """The text of a one-text command (--text or --text-file), its file's warnings said, checked before the model
    loads: not empty, and the --json target writable."""
    from analysis.errors import InputError
    from analysis.run.tokenize import check_text

    from .output import warn

    check_apart(args)
    text, warnings = args.text, []
    if args.text_file is not None:
        text, warnings = read_text_file(args.text_file)
    if not text or not text.strip():
        raise InputError("The text is empty: give --text or a non-empty --text-file.")
    if args.json is not None:
        from analysis.export.paths import check_file_target

        check_file_target(args.json)  # before the slow part: a folder, a device, no permission …
    check_text(text)
    for warning in warnings:
        warn(warning)
    return text


def text_ids(loaded, text: str, args, done: str) -> tuple[list[int], bool]:
    """``text`` tokenised as every command runs it (a byte-order mark removed, BOS or the chat template, the token
    cap), the cut said on stderr with ``done`` ("run: the lens describes that part"): (ids, cut)."""
    from analysis.run.inference import bos_used
    from analysis.run.tokenize import token_limit, tokenize, truncation_warning, without_bom

    from .output import warn

    text, bom = without_bom(text)
    for warning in bom:
        warn(warning)
    use_bos = False if args.chat else bos_used(loaded, args.bos)
    ids, _, cut = tokenize(loaded, text, use_bos, args.max_tokens, chat=args.chat)
    if cut:
        warn(truncation_warning(loaded, ids, use_bos, token_limit(loaded, args.max_tokens), done, chat=args.chat))
    return list(ids), cut
