"""gptstack.model: a nanoGPT-shaped GPT, its attention backends and its decoding modes.

    from gptstack.model import GPT, GPTConfig, generate
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=64))
    logits, loss = model(idx, targets)              # idx, targets: (B, T) int64
    out = generate(model, idx, 20, mode="kv", temperature=0)

This file is the whole public API; see README.md.
"""

from .attention import (
    AttentionBackend,
    attention_backends,
    causal_mask,
    get_attention_backend,
    manual_attention,
    register_attention_backend,
    sdpa_attention,
)
from .bigram import Bigram
from .config import GPTConfig
from .device import DEVICE_CHOICES, autocast, resolve_device
from .errors import ModelConfigError, ModelError
from .generate import KVCacheDecoder, StaticCacheDecoder, generate, stream
from .gpt import GPT
from .graphs import capture, run_on_side_stream
from .io import load_safetensors, save_safetensors, unwrap
from .kv_cache import KVCache, StaticKVCache
from .optimizer import configure_adamw, split_decay_params
from .sampling import logits_to_probs, make_generator, sample
from .train_step import TrainStep

__all__ = [
    "GPT",
    "AttentionBackend",
    "Bigram",
    "DEVICE_CHOICES",
    "GPTConfig",
    "KVCache",
    "KVCacheDecoder",
    "ModelConfigError",
    "ModelError",
    "StaticCacheDecoder",
    "StaticKVCache",
    "TrainStep",
    "attention_backends",
    "autocast",
    "capture",
    "causal_mask",
    "configure_adamw",
    "generate",
    "get_attention_backend",
    "load_safetensors",
    "logits_to_probs",
    "make_generator",
    "manual_attention",
    "register_attention_backend",
    "resolve_device",
    "run_on_side_stream",
    "sample",
    "save_safetensors",
    "sdpa_attention",
    "split_decay_params",
    "stream",
    "unwrap",
]
