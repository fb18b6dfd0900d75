"""Build the tiny random model folders the baseline recording runs on (called by record.py in a subprocess).

    python tests/baseline/build_models.py --root CHECKOUT DEST

Writes DEST/{gpt2,llama,gpt_neox,bert,mistral,qwen2,distilbert} with ``save_pretrained`` and prints one line per
file: its sha256 and path. Fixed seeds; the same bytes on every call (record.py checks that by building twice
with --check).

The generators are the checkout's own (``save_random_family``, ``save_random_gpt2``, ``tiny_wordpiece_tokenizer``
of ``analysis.model.synthetic``); when a restructuring has moved that module, the first module under the checkout that
defines ``save_random_family`` is used. Record the "after" run with ``record.py --models BEFORE/models`` and the
generator is not used at all.

One thing is fixed here, not taken from the generator: the WordPiece trainer of ``tokenizers`` numbers the
``##x`` continuation alphabet in hash-map order, which differs from one process to the next (the same 300
tokens, 41 of them with other ids), so a BERT folder built twice is not the same model. The trained vocabulary is
renumbered in a fixed order (the special tokens first, as trained, then the rest sorted) before the model is built.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import sys
from pathlib import Path

SEED = 7
#: folder name → (model type, what it is for)
FAMILIES = {
    "llama": "grouped-query attention, biases, rope_theta 50000, <s> added by the tokenizer",
    "gpt_neox": "partial rotary, parallel residual, fused QKV",
    "bert": "an encoder, [CLS] … [SEP]",
    "mistral": "a sliding window of 5",
    "qwen2": "q/k/v biases, one key/value head",
    "distilbert": "an encoder with DistilBERT's names",
}


def synthetic_module(root: Path):
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("analysis.model.synthetic")
    except ImportError:
        pass
    for path in sorted(root.rglob("*.py")):
        if ".venv" in path.parts or "tests" in path.parts:
            continue
        try:
            if "def save_random_family" in path.read_text(encoding="utf-8"):
                return importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
        except (OSError, UnicodeDecodeError):
            continue
    raise SystemExit(f"build_models: no module under {root} defines save_random_family")


def canonical_wordpiece(tokenizer):
    """The same tokenizer with its vocabulary numbered in a fixed order (see the module's docstring)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    data = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = data["model"]["vocab"]
    specials = sorted((t["id"], t["content"]) for t in data.get("added_tokens", []))
    assert [i for i, _ in specials] == list(range(len(specials))), specials  # the specials come first, in order
    names = [name for _, name in specials]
    order = names + sorted(t for t in vocab if t not in set(names))
    data["model"]["vocab"] = {t: i for i, t in enumerate(order)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)), unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]")


def build(root: Path, dest: Path) -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    synthetic = synthetic_module(root)
    dest.mkdir(parents=True, exist_ok=True)
    # GPT-2: 2 layers × 2 heads, d 32, context 64 (no BOS by default, as GPT-2)
    synthetic.save_random_gpt2(dest / "gpt2", n_layer=2, n_head=2, d_model=32, n_positions=64, seed=SEED)
    wordpiece = None
    for name in FAMILIES:
        tokenizer = None
        if name in ("bert", "distilbert"):
            wordpiece = wordpiece or canonical_wordpiece(synthetic.tiny_wordpiece_tokenizer())
            tokenizer = wordpiece
        synthetic.save_random_family(dest / name, name, seed=SEED, tokenizer=tokenizer)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    build(args.root.resolve(), args.dest)
    for path in sorted(p for p in args.dest.rglob("*") if p.is_file()):
        print(hashlib.sha256(path.read_bytes()).hexdigest(), path.relative_to(args.dest).as_posix())
    return 0


if __name__ == "__main__":
    sys.exit(main())
