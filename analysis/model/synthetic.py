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


# ----------------------------------------------------------------------------- every family
def _tokenizer_texts(n: int = 30) -> list[str]:
    from pydoc_data import topics

    return [topics.topics[k] for k in sorted(topics.topics)][:n]


def tiny_wordpiece_tokenizer(vocab_size: int = 300):
    """A BERT-style WordPiece tokenizer (lower-cased, ``##`` continuations, [CLS] … [SEP]) trained in a second."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(_tokenizer_texts(), trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    # the trainer numbers the '##' pieces in hash-map order (a different model in every process): renumber them
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = tok.get_vocab()
    order = specials + sorted(t for t in vocab if t not in specials)
    tok.model = models.WordPiece({t: i for i, t in enumerate(order)}, unk_token="[UNK]")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                                ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]")


def tiny_sentencepiece_tokenizer(vocab_size: int = 600):
    """A Llama-2-style tokenizer: BPE over ``▁``-marked words, bytes outside the vocabulary as ``<0xNN>``,
    and ``<s>`` put in front by the tokenizer itself."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator([t.replace("\n", " ") for t in _tokenizer_texts()],
                            trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False))
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


#: The tiny configs the family tests and ``save_random_family`` build: each with what its family has
#: that GPT-2 lacks (grouped-query attention, biases, a sliding window, partial rotary, no mask).
FAMILY_TINY_TYPES = ("gpt2", "llama", "qwen2", "mistral", "gpt_neox", "bert", "distilbert")


def tiny_family_config(model_type: str, vocab_size: int, n_positions: int = 64, bos_token_id: int | None = None,
                       eos_token_id: int | None = None):
    """A transformers config of ``model_type`` with 2 layers and 4 query heads (see FAMILY_TINY_TYPES)."""
    import transformers as tf

    decoder = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=64, vocab_size=vocab_size,
                   max_position_embeddings=n_positions, initializer_range=0.3, bos_token_id=bos_token_id,
                   eos_token_id=eos_token_id)
    encoder = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, intermediate_size=64,
                   vocab_size=vocab_size, max_position_embeddings=n_positions, initializer_range=0.3)
    if model_type == "gpt2":
        return tf.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=n_positions, vocab_size=vocab_size,
                             initializer_range=0.3, bos_token_id=bos_token_id, eos_token_id=eos_token_id)
    if model_type == "llama":  # 4 query heads share 2 key/value heads; biases on; rope_theta ≠ 10000
        return tf.LlamaConfig(num_attention_heads=4, num_key_value_heads=2, attention_bias=True, rope_theta=50000.0,
                              **decoder)
    if model_type == "qwen2":  # q/k/v biases, 4 query heads on one key/value head
        return tf.Qwen2Config(num_attention_heads=4, num_key_value_heads=1, **decoder)
    if model_type == "mistral":  # a sliding window shorter than most texts
        return tf.MistralConfig(num_attention_heads=4, num_key_value_heads=2, sliding_window=5, **decoder)
    if model_type == "gpt_neox":  # a quarter of each head rotated, parallel residual, fused per-head QKV
        return tf.GPTNeoXConfig(num_attention_heads=4, rotary_pct=0.25, use_parallel_residual=True, **decoder)
    if model_type == "bert":
        return tf.BertConfig(**encoder)
    if model_type == "roberta":  # BERT's attention; positions count from its padding id + 1
        return tf.RobertaConfig(**encoder)
    if model_type == "distilbert":
        return tf.DistilBertConfig(n_layers=2, n_heads=4, dim=32, hidden_dim=64, vocab_size=vocab_size,
                                   max_position_embeddings=n_positions, initializer_range=0.3)
    raise ValueError(f"no tiny config for {model_type!r}")


def save_random_family(folder: Path, model_type: str, seed: int = 0, n_positions: int = 64, tokenizer=None,
                       model_class=None, config=None) -> Path:
    """Write a random model of ``model_type`` (one of FAMILY_TINY_TYPES, or roberta) and a fitting tiny tokenizer
    into ``folder`` with save_pretrained: byte-level BPE for GPT-2, GPT-NeoX and Qwen2, SentencePiece-style for
    Llama and Mistral, WordPiece for the encoders. Biases and norm gains are moved off 0 and 1 so they matter.
    ``model_class`` overrides the family's (e.g. BertForPreTraining, to save the pre-training heads); ``config``
    the tiny config (e.g. another rotary scaling), its vocabulary set to the tokenizer's."""
    import torch

    from ..families import family_for

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if tokenizer is None:
        tokenizer = (tiny_wordpiece_tokenizer() if model_type in ("bert", "roberta", "distilbert")
                     else tiny_sentencepiece_tokenizer() if model_type in ("llama", "mistral")
                     else tiny_tokenizer())  # byte-level; Qwen2's own tokenizer class adds <|endoftext|>, which it has
    bos = tokenizer.bos_token_id
    if config is None:
        config = tiny_family_config(model_type, len(tokenizer), n_positions, bos, tokenizer.eos_token_id)
    else:
        config.vocab_size = len(tokenizer)
    family = family_for(config)
    torch.manual_seed(seed)
    cls = model_class or family.model_class(config)
    model = cls._from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # biases start at 0 and norm gains at 1: move both so a recompute that drops one fails
                p.add_(torch.randn_like(p) * (0.3 if "norm" in name.lower() else 0.1))
    model.save_pretrained(folder)
    tokenizer.model_max_length = n_positions
    tokenizer.save_pretrained(folder)
    return folder
