"""Tiny GGUF files written with the ``gguf`` package, as llama.cpp's converter writes them.

Used by the tests (every architecture AttnScope opens from GGUF, quantized variants, and broken files for every
refusal) and the model-folder scanner's tests. :func:`write_gguf` converts a transformers model and its byte-level
tokenizer: llama.cpp's tensor names, its row permutation of a Llama's query/key projections (which transformers
undoes when it reads the file), GPT-2's projections transposed to (out, in). Nothing here downloads anything.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

#: What this module writes: the GGUF architectures AttnScope opens, and a Mistral model written as llama.cpp writes
#: one, a llama file (read back as a Llama: the same weights and arithmetic).
ARCHES = ("llama", "mistral", "qwen2", "gpt2")


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute``: rotary's two halves of each head interleaved, row-wise."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama_tensors(state: dict, config, arch: str) -> dict[str, np.ndarray]:
    n_head, n_kv = config.num_attention_heads, config.num_key_value_heads
    out = {"token_embd.weight": state["model.embed_tokens.weight"], "output_norm.weight": state["model.norm.weight"]}
    if "lm_head.weight" in state and not config.tie_word_embeddings:
        out["output.weight"] = state["lm_head.weight"]
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(config.num_hidden_layers):
        for hf, gg in names.items():
            for kind in ("weight", "bias"):
                key = f"model.layers.{i}.{hf}.{kind}"
                if key not in state:
                    continue
                w = state[key]
                if arch != "qwen2" and hf == "self_attn.q_proj":
                    w = _permute(w, n_head)
                elif arch != "qwen2" and hf == "self_attn.k_proj":
                    w = _permute(w, n_kv)
                out[f"blk.{i}.{gg}.{kind}"] = w
    return out


def _gpt2_tensors(state: dict, config) -> dict[str, np.ndarray]:
    out = {"token_embd.weight": state["transformer.wte.weight"], "position_embd.weight": state["transformer.wpe.weight"],
           "output_norm.weight": state["transformer.ln_f.weight"], "output_norm.bias": state["transformer.ln_f.bias"]}
    names = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    for i in range(config.n_layer):
        for hf, gg in names.items():
            for kind in ("weight", "bias"):
                w = state[f"transformer.h.{i}.{hf}.{kind}"]
                out[f"blk.{i}.{gg}.{kind}"] = w.T.copy() if kind == "weight" and w.ndim == 2 else w  # Conv1D: (in, out)
    return out


def _add_tokenizer(writer, tokenizer, chat_template: str | None) -> None:
    """A byte-level BPE tokenizer as llama.cpp stores one (``tokenizer.ggml.model = gpt2``)."""
    vocab = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    special = set(tokenizer.all_special_tokens)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])  # 3: control, 1: normal
    import json

    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    if tokenizer.bos_token_id is not None:
        writer.add_bos_token_id(tokenizer.bos_token_id)
    if tokenizer.eos_token_id is not None:
        writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_add_bos_token(False)
    if chat_template:
        writer.add_chat_template(chat_template)


def write_gguf(path: Path, model, tokenizer, arch: str, quant: str = "F32", name: str | None = None,
               chat_template: str | None = None, tokenizer_too: bool = True, extra: dict | None = None,
               truncate: int = 0) -> Path:
    """Write ``model`` (a transformers Llama/Mistral/Qwen2/GPT-2 causal LM) and ``tokenizer`` as a GGUF file of
    ``arch`` with its 2-D weights stored as ``quant`` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: the types the
    ``gguf`` package can quantize; 1-D tensors stay F32, as llama.cpp keeps them). ``extra``: metadata keys to add
    or override (e.g. ``{"general.type": "adapter"}``) — a string, int, float or list value; ``tokenizer_too=False``
    leaves the tokenizer out; ``truncate`` cuts that many bytes off the end."""
    import gguf
    from gguf.quants import quantize

    config = model.config
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    name = name or f"tiny {arch}"
    if arch == "mistral":
        arch = "llama"  # as llama.cpp writes a Mistral: a llama file
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    qtype = gguf.GGMLQuantizationType[quant]
    if arch == "gpt2":
        tensors = _gpt2_tensors(state, config)
        writer.add_context_length(config.n_positions)
        writer.add_embedding_length(config.n_embd)
        writer.add_feed_forward_length(config.n_inner or 4 * config.n_embd)
        writer.add_block_count(config.n_layer)
        writer.add_head_count(config.n_head)
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
    else:
        tensors = _llama_tensors(state, config, arch)
        writer.add_context_length(config.max_position_embeddings)
        writer.add_embedding_length(config.hidden_size)
        writer.add_feed_forward_length(config.intermediate_size)
        writer.add_block_count(config.num_hidden_layers)
        writer.add_head_count(config.num_attention_heads)
        writer.add_head_count_kv(config.num_key_value_heads)
        writer.add_layer_norm_rms_eps(config.rms_norm_eps)
        writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
        writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    if tokenizer_too:
        _add_tokenizer(writer, tokenizer, chat_template)
    for key, value in (extra or {}).items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_string(key, str(value))
    for key, w in tensors.items():
        w = np.ascontiguousarray(w, dtype=np.float32)
        if w.ndim == 2 and qtype not in (gguf.GGMLQuantizationType.F32,):
            if qtype == gguf.GGMLQuantizationType.F16:
                writer.add_tensor(key, w.astype(np.float16))
            else:
                data = quantize(w, qtype)
                writer.add_tensor(key, data, raw_shape=data.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(key, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if truncate:
        with open(path, "r+b") as f:
            f.truncate(max(0, Path(path).stat().st_size - truncate))
    return Path(path)


def tiny_model(arch: str, seed: int = 0, n_positions: int = 64):
    """A random transformers model of the GGUF architecture ``arch`` and a byte-level BPE tokenizer (512 tokens,
    ``<|endoftext|>`` its BOS/EOS): 2 layers, 4 query heads (Llama-style: 2 key/value heads, Qwen2 one, with q/k/v
    biases), rows a multiple of 32 so every block quantization applies. Biases and norm gains off 0 and 1."""
    import torch
    import transformers as tf

    from .synthetic import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    common = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, vocab_size=len(tokenizer),
                  max_position_embeddings=n_positions, initializer_range=0.3, bos_token_id=eot, eos_token_id=eot,
                  tie_word_embeddings=False)
    if arch == "gpt2":  # 1,024 positions: transformers reads a GPT-2 GGUF's context length into no config key
        config = tf.GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=1024, vocab_size=len(tokenizer),
                               initializer_range=0.3, bos_token_id=eot, eos_token_id=eot)
        cls = tf.GPT2LMHeadModel
    elif arch == "llama":
        config, cls = tf.LlamaConfig(num_attention_heads=4, num_key_value_heads=2, rope_theta=50000.0, **common), \
            tf.LlamaForCausalLM
    elif arch == "mistral":
        # transformers reads no sliding window from a GGUF (its Mistral default, 4,096, applies)
        config, cls = tf.MistralConfig(num_attention_heads=4, num_key_value_heads=2, **common), tf.MistralForCausalLM
    elif arch == "qwen2":
        config, cls = tf.Qwen2Config(num_attention_heads=4, num_key_value_heads=1, **common), tf.Qwen2ForCausalLM
    else:
        raise ValueError(f"no tiny GGUF model for {arch!r}")
    torch.manual_seed(seed)
    model = cls._from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * (0.3 if "norm" in pname.lower() else 0.1))
    tokenizer.model_max_length = n_positions
    return model, tokenizer


def write_tiny_gguf(path: Path, arch: str = "llama", quant: str = "F32", seed: int = 0, **options) -> Path:
    """:func:`tiny_model` of ``arch`` written to ``path`` by :func:`write_gguf` (``options`` go there)."""
    model, tokenizer = tiny_model(arch, seed)
    return write_gguf(Path(path), model, tokenizer, arch, quant, **options)
