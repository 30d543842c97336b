"""One forward and backward of the causal attention per candidate, for Nsight Compute.

    ncu --profile-from-start off --set full -o attn \
        python packages/cuda_ops/scripts/attention_ncu.py --preset gpt2-124m

Inputs as the model has them (q, k, v views of one (B, T, 3C) c_attn output, bf16): gptstack's
kernels, then SDPA held to each fast backend (flash, efficient, cudnn) that takes the shape. Two
warm-up passes run before the profiler starts (cudaProfilerStart), so ncu sees one call of each
kernel, in order, inside NVTX ranges named after the candidate. Prints each candidate's
relative error against float32 attention first (a profile of a wrong kernel is no profile).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gptstack.cuda_ops import causal_attention
from gptstack.cuda_ops.testing import rel_error
from gptstack.tools.bench_cli import preset_shape

BACKENDS = {
    "sdpa-flash": SDPBackend.FLASH_ATTENTION,
    "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
}


def _inputs(preset: str, batch: int | None):
    shape = preset_shape(preset, batch)
    B, T, C, nh = shape.batch_size, shape.block_size, shape.n_embd, shape.n_head
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = torch.randn(B, T, 3 * C, generator=g, device="cuda").bfloat16().requires_grad_()
    dy = torch.randn(B, nh, T, C // nh, generator=g, device="cuda").bfloat16()
    return qkv, dy, nh


def _heads(qkv: torch.Tensor, nh: int):
    B, T, C3 = qkv.shape
    q, k, v = qkv.split(C3 // 3, dim=2)
    return [t.view(B, T, nh, C3 // 3 // nh).transpose(1, 2) for t in (q, k, v)]


def _sdpa(backend):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpt2-124m")
    ap.add_argument("--batch", type=int, default=None, help="default: the preset's batch size")
    args = ap.parse_args()
    qkv, dy, nh = _inputs(args.preset, args.batch)
    q, k, v = _heads(qkv, nh)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    runs = {"gptstack": causal_attention} | {name: _sdpa(b) for name, b in BACKENDS.items()}
    ok = {}
    for name, fn in runs.items():
        try:
            err = rel_error(fn(q, k, v).float(), ref)
        except RuntimeError as e:  # the backend refuses the shape: left out
            print(f"{name}: skipped ({str(e).splitlines()[0][:100]})")
            continue
        print(f"{name}: relative error {err:.2e}")
        ok[name] = fn

    def step(fn):
        qkv.grad = None
        y = fn(*_heads(qkv, nh))
        y.backward(dy)

    for _ in range(2):
        for fn in ok.values():
            step(fn)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in ok.items():
        with torch.cuda.nvtx.range(name):
            step(fn)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
