"""The one-token forward of a GPT through gptstack.cuda_ops' fused decode kernels.

    step = FusedDecodeStep(model, cache)      # ModelError if this model or build cannot
    logits = step(token, pos)                 # token (B, 1), pos 0-d int64 -> (B, V)

The same function as `model(token, last_only=True, kv_cache=cache, pos=pos)` (tests compare the
two), in 5 launches per block plus 4 (embedding, ln_f + LM head) instead of ~28 per block: a
batch-1 decode step is launch bound, so this is what makes the graph decoder fast
(csrc/decode.h has the layout; the H200 numbers are in benchmarks/README.md, `generate`).
Dropout is never applied (decoding runs in eval mode).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .config import native_ops
from .errors import ModelError
from .kv_cache import StaticKVCache

# The CUDA kernels' limits (csrc/decode.h): head size, and the widest input row (4 * n_embd).
MAX_HEAD_SIZE = 128
MAX_ROW = 12288


def unsupported_reason(model, device: torch.device) -> str | None:
    """Why the fused step cannot run this model here, or None when it can."""
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1:
        return f"the weights mix dtypes {sorted(map(str, dtypes))}; cast the model to one dtype"
    (dtype,) = dtypes
    cfg = model.config
    if device.type == "cuda":
        if dtype not in (torch.float32, torch.bfloat16):
            return f"the CUDA kernels take float32 or bfloat16 weights, not {dtype}"
        if cfg.head_size > MAX_HEAD_SIZE or 4 * cfg.n_embd > MAX_ROW:
            return (
                f"head size {cfg.head_size} / MLP width {4 * cfg.n_embd} is above the CUDA "
                f"kernels' limits ({MAX_HEAD_SIZE} / {MAX_ROW})"
            )
    try:
        ops = native_ops()
    except ModelError as e:
        return str(e)
    if device.type == "cuda" and not ops.build_info()["cuda"]:
        return "gptstack.cuda_ops was built without CUDA kernels (no nvcc at build time)"
    return None


class FusedDecodeStep:
    """Callable (token (B, 1) int64, pos 0-d int64 tensor) -> logits (B, V) for `model`, reading
    and writing `cache` like the model's own forward does."""

    def __init__(self, model, cache: StaticKVCache) -> None:
        device = model.wte.weight.device
        reason = unsupported_reason(model, device)
        if reason is not None:
            raise ModelError(f"the fused decode step cannot run: {reason}")
        self.model, self.cache = model, cache
        self.ops = native_ops()
        self.eps = model.ln_f.eps

    def __call__(self, token: Tensor, pos: Tensor) -> Tensor:
        m, ops, eps = self.model, self.ops, self.eps
        x = m.wte.weight[token[:, 0]] + m.wpe.weight[pos]  # (B, C)
        for i, block in enumerate(m.h):
            attn, mlp = block.attn, block.mlp
            qkv = ops.decode_linear(
                x, attn.c_attn.weight, attn.c_attn.bias,
                ln_weight=block.ln_1.weight, ln_bias=block.ln_1.bias, eps=eps,
            )  # fmt: skip
            y = ops.decode_attention(qkv, self.cache.k[i], self.cache.v[i], pos)  # (B, C)
            x = ops.decode_linear(y, attn.c_proj.weight, attn.c_proj.bias, residual=x)
            h = ops.decode_linear(
                x, mlp.c_fc.weight, mlp.c_fc.bias,
                ln_weight=block.ln_2.weight, ln_bias=block.ln_2.bias, gelu=True, eps=eps,
            )  # fmt: skip
            x = ops.decode_linear(h, mlp.c_proj.weight, mlp.c_proj.bias, residual=x)
        return ops.decode_linear(
            x, m.lm_head.weight, None, ln_weight=m.ln_f.weight, ln_bias=m.ln_f.bias, eps=eps
        )  # (B, V)
