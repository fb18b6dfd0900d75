"""Train AttnScope's bundled GPT-2 from offline text, reproducibly.

One command (from the project root, in the project's virtual environment):

    python -m resources.training.train_bundled --out resources/model --minutes 60

What it does, in order:
1. builds a corpus from text every Debian/Python machine has offline:
   Python's own documentation topics (``pydoc_data/topics.py``), the docstrings of
   the standard library (read with ``ast``, nothing is imported) and Debian's
   ``fortunes`` files (``/usr/share/games/fortunes``; ``apt-get install fortunes
   fortunes-min``), split into documents and into train / validation by a hash of
   each document, so the split does not depend on order or seed;
2. trains a byte-level BPE tokenizer (``tokenizers``) with ``<|endoftext|>`` as its
   only special token;
3. trains a ``transformers.GPT2LMHeadModel`` with plain torch on the CPU, with
   three mixtures of training sequences, each starting with ``<|endoftext|>`` as BOS
   (so heads have a fixed place to park attention: the sink):
     * natural text,
     * natural text whose tail repeats an earlier span of itself,
     * random tokens repeated (the standard induction task); the loss is masked on
       the first copy, which no model can predict, so it does not teach the model
       to spread probability over random tokens.
   A curriculum makes previous-token and induction heads form within a CPU budget:
   phase 1 trains on short (64-token) repeated random sequences only, until the loss
   on the repeated copies collapses (the induction circuit has formed: ~560 steps,
   ~2.5 minutes here); phase 2 trains on 256-token sequences that are mostly natural
   text, keeping repeated text and repeated random tokens in the mix. Position
   embeddings start as scaled sinusoids (then are learned), which makes "the
   position just before" easy to find. See the model card for what was tried;
4. writes ``model.safetensors``, ``config.json`` (with ``attnscope_prepend_bos``),
   the tokenizer and ``training_log.jsonl`` into ``--out``.

Everything is seeded; the same machine and torch version give the same model.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import random
import shutil
import sys
import sysconfig
import time
from pathlib import Path

FORTUNES_DIR = Path("/usr/share/games/fortunes")
EOT = "<|endoftext|>"


# ----------------------------------------------------------------------------- corpus
def pydoc_topics() -> list[str]:
    from pydoc_data import topics

    return [topics.topics[k] for k in sorted(topics.topics)]


def stdlib_docstrings() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    docs: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if any(p in {"test", "tests", "site-packages", "idlelib", "lib2to3", "turtledemo"} for p in rel):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 80:
                    docs.append(doc)
    return docs


def fortunes() -> list[str]:
    if not FORTUNES_DIR.is_dir():
        return []
    docs: list[str] = []
    for path in sorted(FORTUNES_DIR.iterdir()):
        if path.suffix in {".dat", ".u8"} or path.is_dir() or path.is_symlink():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        docs.extend(d.strip() for d in text.split("\n%\n") if len(d.strip()) >= 20)
    return docs


def build_corpus() -> dict[str, list[str]]:
    return {"pydoc_topics": pydoc_topics(), "stdlib_docstrings": stdlib_docstrings(), "fortunes": fortunes()}


def is_validation(doc: str, fraction: float = 0.02) -> bool:
    digest = hashlib.sha256(doc.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") < fraction * 2**32


# ----------------------------------------------------------------------------- tokenizer
def train_tokenizer(docs: list[str], vocab_size: int, out: Path):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(docs, vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT], show_progress=False)
    tok = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=EOT, eos_token=EOT, unk_token=EOT)
    tok.model_max_length = 10**9  # set properly from the config by save_model()
    return tok


# ----------------------------------------------------------------------------- batches
class Batches:
    """Yields (input_ids, labels) LongTensors of shape (B, T) for the current curriculum mix."""

    def __init__(self, stream, vocab_size: int, eot_id: int, seq_len: int, batch: int, seed: int):
        import numpy as np

        self.np = np
        self.stream = stream  # 1-D int array: all training documents, each followed by EOT
        self.vocab_size, self.eot, self.T, self.B = vocab_size, eot_id, seq_len, batch
        self.rng = np.random.default_rng(seed)

    def natural(self):
        start = int(self.rng.integers(0, len(self.stream) - self.T))
        body = self.stream[start : start + self.T - 1]
        ids = self.np.concatenate([[self.eot], body])
        return ids, ids.copy()

    def natural_repeat(self):
        """BOS, a text prefix, then a span of that prefix again (and the text continues)."""
        T, rng = self.T, self.rng
        span = int(rng.integers(8, T // 3))
        gap = int(rng.integers(0, T - 1 - 2 * span))
        start = int(rng.integers(0, len(self.stream) - T))
        text = self.stream[start : start + T]
        head = text[: span + gap]
        rep_from = int(rng.integers(0, gap + 1))
        body = self.np.concatenate([head, head[rep_from : rep_from + span], text[span + gap :]])[: T - 1]
        ids = self.np.concatenate([[self.eot], body])
        return ids, ids.copy()

    def random_repeat(self):
        """BOS, then a random span repeated until the context is full; loss masked on copy 1."""
        T, rng = self.T, self.rng
        span = int(rng.integers(4, (T - 1) // 2 + 1))
        # token 0..vocab-1 except EOT; the probe in the engine samples the same way
        r = rng.choice(self.vocab_size - 1, size=span, replace=False)
        r = r + (r >= self.eot)
        reps = (T - 1 + span - 1) // span
        body = self.np.tile(r, reps)[: T - 1]
        ids = self.np.concatenate([[self.eot], body])
        labels = ids.copy()
        labels[: span + 1] = -100  # BOS and the first copy: unpredictable
        return ids, labels

    def next(self, mix: tuple[float, float, float], seq_len: int | None = None, batch: int | None = None):
        import torch

        self.T = seq_len or self.T
        kinds = self.rng.choice(3, size=batch or self.B, p=mix)
        makers = (self.natural, self.natural_repeat, self.random_repeat)
        pairs = [makers[k]() for k in kinds]
        ids = torch.tensor(self.np.stack([p[0] for p in pairs]), dtype=torch.long)
        labels = torch.tensor(self.np.stack([p[1] for p in pairs]), dtype=torch.long)
        return ids, labels


SYNTHETIC_ONLY = (0.0, 0.0, 1.0)


def curriculum(progress: float, induction_formed_at: float | None, phase1_limit: float = 0.35) -> tuple[float, float, float]:
    """(natural, natural_repeat, random_repeat) shares of the batch.

    Phase 1: only short repeated random sequences, until the loss on the repeated copies has
    collapsed (induction has formed) or ``phase1_limit`` of the budget is spent. Phase 2: mostly
    natural text, with repeated text and repeated random tokens kept in the mix so the heads stay.
    """
    if induction_formed_at is None and progress < phase1_limit:
        return SYNTHETIC_ONLY
    start = induction_formed_at if induction_formed_at is not None else phase1_limit
    rest = (progress - start) / max(1e-9, 1 - start)
    return (0.6, 0.2, 0.2) if rest < 0.5 else (0.7, 0.15, 0.15)


# ----------------------------------------------------------------------------- evaluation
def evaluate(model, val_stream, eot: int, seq_len: int, vocab_size: int, n_windows: int = 48) -> dict:
    import numpy as np
    import torch

    model.eval()
    model.set_attn_implementation("eager")  # evaluation reads attention weights; training uses sdpa
    losses = []
    with torch.no_grad():
        starts = np.linspace(0, len(val_stream) - seq_len, n_windows).astype(int)
        for chunk in np.array_split(starts, max(1, n_windows // 16)):
            ids = torch.tensor(np.stack([np.concatenate([[eot], val_stream[s : s + seq_len - 1]]) for s in chunk]))
            out = model(ids, labels=ids)
            losses.append(out.loss.item())
        rng = np.random.default_rng(1234)
        span = 40
        r = rng.choice(vocab_size - 1, size=span, replace=False)
        r = r + (r >= eot)
        ids = torch.tensor(np.concatenate([[eot], r, r]))[None]
        out = model(ids, output_attentions=True)
        logits = out.logits[0, :-1]
        heads = {}
        if out.attentions:
            a = torch.stack(out.attentions)[:, 0]  # (layer, head, n, n)
            n = a.shape[-1]
            i = torch.arange(1, n)
            heads["best_previous_token"] = a[:, :, i, i - 1].mean(-1).max().item()
            j = torch.arange(span + 1, n)  # second copy: the token after the earlier occurrence is j - span + 1
            heads["best_induction"] = a[:, :, j, j - span + 1].mean(-1).max().item()
            heads["best_sink"] = a[:, :, 1:, 0].mean(-1).max().item()
        nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
        first, second = nll[1:span].mean().item(), nll[span + 1 :].mean().item()
    model.set_attn_implementation("sdpa")
    model.train()
    return {"val_loss": float(np.mean(losses)), "probe_loss_copy1": first, "probe_loss_copy2": second, **heads}


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("resources/model"))
    p.add_argument("--minutes", type=float, default=60.0, help="training budget (wall clock)")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: budget only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--pos-init", choices=("gpt2", "sinusoidal"), default="sinusoidal",
                   help="initial position embeddings: GPT-2's random normal, or sinusoids (learned from there)")
    p.add_argument("--phase1-seq-len", type=int, default=64, help="length of the phase-1 repeated sequences")
    p.add_argument("--phase1-batch", type=int, default=32)
    p.add_argument("--phase1-limit", type=float, default=0.35, help="largest share of the budget for phase 1")
    p.add_argument("--induction-loss", type=float, default=1.5,
                   help="phase 1 ends when the mean loss on repeated copies falls below this")
    args = p.parse_args(argv)

    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "training_log.jsonl"
    log = log_path.open("w")

    def emit(record: dict) -> None:
        line = json.dumps(record)
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    t0 = time.time()
    corpus = build_corpus()
    train_docs, val_docs = [], []
    for source in corpus.values():
        for doc in source:
            (val_docs if is_validation(doc) else train_docs).append(doc)
    emit({
        "event": "corpus",
        "sources": {k: {"documents": len(v), "chars": sum(map(len, v))} for k, v in corpus.items()},
        "train_documents": len(train_docs), "val_documents": len(val_docs),
        "sha256": hashlib.sha256("\x00".join(train_docs + val_docs).encode()).hexdigest(),
    })

    tok = train_tokenizer(train_docs, args.vocab, args.out)
    eot = tok.convert_tokens_to_ids(EOT)

    def encode(docs: list[str]):
        ids = tok(docs, add_special_tokens=False)["input_ids"]
        return np.concatenate([np.array(x + [eot], dtype=np.int64) for x in ids])

    train_stream, val_stream = encode(train_docs), encode(val_docs)
    emit({"event": "tokenized", "train_tokens": int(len(train_stream)), "val_tokens": int(len(val_stream)),
          "vocab": len(tok), "seconds": round(time.time() - t0, 1)})

    config = GPT2Config(
        vocab_size=len(tok), n_positions=args.context, n_embd=args.d_model, n_layer=args.layers,
        n_head=args.heads, bos_token_id=eot, eos_token_id=eot, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, tie_word_embeddings=True,
    )
    config.attnscope_prepend_bos = True
    model = GPT2LMHeadModel(config)
    if args.pos_init == "sinusoidal":
        # Sinusoids make "the position just before" a fixed linear map of the position vector,
        # so previous-token heads (and the induction heads that build on them) form early.
        # Scaled to the token embeddings' norm; the embeddings stay trainable.
        with torch.no_grad():
            pos = torch.arange(args.context, dtype=torch.float32)[:, None]
            freq = torch.exp(-math.log(10000.0) * torch.arange(0, args.d_model, 2, dtype=torch.float32) / args.d_model)
            table = torch.zeros(args.context, args.d_model)
            table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
            token_norm = model.transformer.wte.weight.norm(dim=1).mean()
            model.transformer.wpe.weight.copy_(table / table.norm(dim=1, keepdim=True) * token_norm)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    emit({"event": "model", "parameters": n_params, "config": {k: getattr(config, k) for k in
          ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")}})

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98))
    batches = Batches(train_stream, len(tok), eot, args.seq_len, args.batch, args.seed)
    budget_s = args.minutes * 60
    warmup = 200
    step, t_train = 0, time.time()
    induction_formed_at: float | None = None
    copy_losses: list[float] = []
    while True:
        elapsed = time.time() - t_train
        progress = elapsed / budget_s
        if progress >= 1 or (args.max_steps and step >= args.max_steps):
            break
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1))))
        for g in opt.param_groups:
            g["lr"] = lr
        mix = curriculum(progress, induction_formed_at, args.phase1_limit)
        phase1 = mix == SYNTHETIC_ONLY
        ids, labels = batches.next(mix, args.phase1_seq_len if phase1 else args.seq_len,
                                   args.phase1_batch if phase1 else args.batch)
        loss = model(ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if phase1:
            copy_losses.append(loss.item())
            if len(copy_losses) >= 50 and sum(copy_losses[-50:]) / 50 < args.induction_loss:
                induction_formed_at = progress
                emit({"event": "induction_formed", "step": step, "minutes": round(elapsed / 60, 2),
                      "copy_loss": round(sum(copy_losses[-50:]) / 50, 4)})
        if step % min(250, args.eval_every) == 0 or step == 1:
            record = {"event": "step", "step": step, "minutes": round(elapsed / 60, 2), "lr": round(lr, 6),
                      "train_loss": round(loss.item(), 4), "mix": list(mix)}
            if step % 1000 == 0:
                model.save_pretrained(args.out / "checkpoint", safe_serialization=True)
                tok.save_pretrained(args.out / "checkpoint")
            if step % args.eval_every == 0 or step == 1:
                scores = evaluate(model, val_stream, eot, args.seq_len, len(tok))
                record.update({k: round(v, 4) for k, v in scores.items()})
            emit(record)

    final = evaluate(model, val_stream, eot, args.seq_len, len(tok), n_windows=192)
    emit({"event": "done", "steps": step, "tokens_seen": step * args.batch * args.seq_len,
          "train_minutes": round((time.time() - t_train) / 60, 2), **{k: round(v, 4) for k, v in final.items()}})
    model.eval()
    model.save_pretrained(args.out, safe_serialization=True)
    tok.model_max_length = args.context
    tok.save_pretrained(args.out)
    shutil.rmtree(args.out / "checkpoint", ignore_errors=True)  # only for watching a run; not shipped
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
