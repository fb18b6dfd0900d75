"""GPT-2-config models with random weights, saved like any ``save_pretrained`` folder.

Used by the tests (small configs, the GPT-2-small shape) and by the benchmark (speed does not
depend on weight values). Nothing here downloads anything.
"""
from __future__ import annotations

from pathlib import Path

SMALL = {"n_layer": 12, "n_head": 12, "d_model": 768, "n_positions": 1024}  # GPT-2 small
XL = {"n_layer": 48, "n_head": 25, "d_model": 1600, "n_positions": 1024}  # GPT-2 xl


def tiny_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer trained in a second on Python's own documentation text."""
    from pydoc_data import topics
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast

    texts = [topics.topics[k] for k in sorted(topics.topics)][:40]
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    return GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                             eos_token="<|endoftext|>", unk_token="<|endoftext|>")


def save_random_gpt2(folder: Path, n_layer: int = 2, n_head: int = 2, d_model: int = 32, n_positions: int = 64,
                     vocab_size: int | None = None, tokenizer=None, seed: int = 0, prepend_bos: bool = False,
                     safetensors: bool = True) -> Path:
    """Write a randomly initialised ``GPT2LMHeadModel`` and a tokenizer into ``folder``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer or tiny_tokenizer()
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = GPT2Config(vocab_size=vocab_size or len(tokenizer), n_positions=n_positions, n_embd=d_model,
                        n_layer=n_layer, n_head=n_head, bos_token_id=eot, eos_token_id=eot)
    if prepend_bos:
        config.attnscope_prepend_bos = True
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(folder)
    if not safetensors:  # an old-style folder with pickle weights only (transformers 5 no longer writes these)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    tokenizer.model_max_length = n_positions
    tokenizer.save_pretrained(folder)
    return folder
