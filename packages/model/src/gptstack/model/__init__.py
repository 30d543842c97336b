"""gptstack.model: a nanoGPT-shaped GPT, its attention backends and its decoding modes.

    from gptstack.model import GPT, GPTConfig, generate
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=4, n_embd=64))
    logits, loss = model(idx, targets)              # idx, targets: (B, T) int64
    out = generate(model, idx, 20, mode="kv", temperature=0)

This file is the whole public API; see README.md. Names load on first use (PEP 562), so
`GPTConfig` and the errors import without torch: the CLI's `--help` and its error handling stay
fast, and torch loads when a model is built.
"""

from importlib import import_module
from typing import Any

# public name -> module (relative to this package) that defines it
_EXPORTS = {
    "AttentionBackend": ".attention",
    "attention_backends": ".attention",
    "causal_mask": ".attention",
    "get_attention_backend": ".attention",
    "manual_attention": ".attention",
    "register_attention_backend": ".attention",
    "sdpa_attention": ".attention",
    "Bigram": ".bigram",
    "COMPILE_MODES": ".compiling",
    "compile_model": ".compiling",
    "GPTConfig": ".config",
    "DEVICE_CHOICES": ".device",
    "autocast": ".device",
    "resolve_device": ".device",
    "ModelConfigError": ".errors",
    "ModelError": ".errors",
    "Distillation": ".distillation",
    "distillation_loss": ".distillation",
    "KVCacheDecoder": ".decoding",
    "StaticCacheDecoder": ".decoding",
    "generate": ".decoding",
    "stream": ".decoding",
    "GPT": ".gpt",
    "GraphDecoder": ".graph_decoding",
    "WINDOWS": ".graph_decoding",
    "window_length": ".graph_decoding",
    "capture": ".graphs",
    "run_on_side_stream": ".graphs",
    "load_safetensors": ".io",
    "save_safetensors": ".io",
    "unwrap": ".io",
    "KVCache": ".kv_cache",
    "StaticKVCache": ".kv_cache",
    "configure_adamw": ".optimizer",
    "split_decay_params": ".optimizer",
    "logits_to_probs": ".sampling",
    "make_generator": ".sampling",
    "sample": ".sampling",
    "TrainStep": ".train_step",
    "WeightAverage": ".weight_average",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gptstack.model' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
