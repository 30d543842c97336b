"""The slide window's attention-side launches one by one, at the presets' shapes: the window's
causal attention (cuda_ops' 4-warp and split-keys kernels, SDPA), the cached step's
decode_attention at a full cache, and, where the window is short (esp32's 64 rows), the
one-launch ops against the launches they replace: window_attention against decode_linear +
causal_attention, embedded_window_attention against window_embed and window_attention,
window_attention with c_proj against it and a decode_linear call, window_mlp
against three decode_linear calls, those with mlp.c_proj's K split over a cluster,
decode_tail against the four one-row decode_linear calls it stands for, and mlp.c_fc with and
without its LayerNorm and GELU. Each as
a chain of dependent calls captured in one CUDA graph (window_linear_bench.graph_us), median
microseconds a call.

    python3 packages/cuda_ops/scripts/window_parts_bench.py [--json F]
    python3 packages/cuda_ops/scripts/window_parts_bench.py --once    # each once, for ncu:
    ncu -k regex:"attention_forward|decode_attention|window_" python3 ... --once
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops.attention import cuda_variant

sys.path.insert(0, str(Path(__file__).resolve().parent))
from window_linear_bench import graph_us, write_record  # noqa: E402

# preset: heads, window rows (block_size), head size
SHAPES = {"shakespeare-char": (6, 256, 64), "esp32": (8, 64, 32)}


def candidates(nh: int, T: int, hs: int, g: torch.Generator) -> dict:
    def rnd(*s, scale=1.0):
        return (scale * torch.randn(*s, generator=g, device="cuda")).to(torch.bfloat16)

    C = nh * hs
    qkv = rnd(1, T, 3 * C)

    def heads(qkv=qkv):
        return [t.view(1, T, nh, hs).transpose(1, 2) for t in qkv.split(C, dim=2)]

    def split():
        with cuda_variant(forward_warps="split"):
            return ops.causal_attention(*heads())

    row, kc, vc = qkv[0, -1:].contiguous(), rnd(1, nh, T, hs), rnd(1, nh, T, hs)
    pos = torch.tensor([T - 1], device="cuda")
    out = {
        "window attention (4 warps)": lambda: ops.causal_attention(*heads()),
        "window attention (split keys)": split,
        "window attention (SDPA)": lambda: F.scaled_dot_product_attention(*heads(), is_causal=True),
        "decode_attention (full cache)": lambda: ops.decode_attention(row, kc, vc, pos),
    }
    if T > ops.decode.WINDOW_ATTENTION_MAX_T:
        return out
    x, w, b = rnd(1, T, C), rnd(3 * C, C, scale=C**-0.5), rnd(3 * C)
    lw, lb = 1 + rnd(C, scale=0.1), rnd(C, scale=0.1)

    def two_launches():
        q = ops.decode_linear(x.view(T, C), w, b, ln_weight=lw, ln_bias=lb).view(1, T, 3 * C)
        return ops.causal_attention(*heads(q))

    out["window_attention (one launch)"] = lambda: ops.window_attention(
        x, w, b, ln_weight=lw, ln_bias=lb, n_head=nh
    )
    out["decode_linear + causal_attention"] = two_launches
    vocab = 512
    wte, wpe = rnd(vocab, C), rnd(T, C)
    ids = torch.randint(0, vocab, (1, T), generator=g, device="cuda")
    tok = torch.randint(0, vocab, (1,), generator=g, device="cuda")

    def embed_then_attention():
        e = ops.window_embed(ids, tok, wte, wpe)
        return ops.window_attention(e, w, b, ln_weight=lw, ln_bias=lb, n_head=nh)

    out["embedded_window_attention (one launch)"] = lambda: ops.embedded_window_attention(
        ids, tok, wte, wpe, w, b, ln_weight=lw, ln_bias=lb, n_head=nh
    )
    out["window_embed + window_attention"] = embed_then_attention
    y, r, wp = rnd(T, C), rnd(T, C), rnd(C, C, scale=C**-0.5)

    def attention_then_proj():
        a = ops.window_attention(x, w, b, ln_weight=lw, ln_bias=lb, n_head=nh).view(T, C)
        return ops.decode_linear(a, wp, b[:C], residual=x.view(T, C))

    out["window_attention + c_proj (one launch)"] = lambda: ops.window_attention(
        x, w, b, ln_weight=lw, ln_bias=lb, n_head=nh, proj_weight=wp, proj_bias=b[:C]
    )
    out["window_attention, then c_proj"] = attention_then_proj
    wf, wm = rnd(4 * C, C, scale=C**-0.5), rnd(C, 4 * C, scale=(4 * C) ** -0.5)

    def mlp_three():
        x1 = ops.decode_linear(y, wp, None, residual=r)
        h = ops.decode_linear(x1, wf, None, ln_weight=lw, ln_bias=lb, gelu=True)
        return ops.decode_linear(h, wm, None, residual=x1)

    def mlp_three_split():
        x1 = ops.decode_linear(y, wp, None, residual=r)
        h = ops.decode_linear(x1, wf, None, ln_weight=lw, ln_bias=lb, gelu=True)
        return ops.decode_linear(h, wm, None, residual=x1, split_k=True)

    # the step's end for its last row: the last block after attention and the LM head
    V = 512
    tail_w = [wp, rnd(C), lw, lb, wf, rnd(4 * C), wm, rnd(C), lw, lb, rnd(V, C, scale=C**-0.5)]
    yr, xr = y[-1:].contiguous(), r[-1:].contiguous()

    def tail_four():
        x1 = ops.decode_linear(yr, wp, tail_w[1], residual=xr)
        h = ops.decode_linear(x1, wf, tail_w[5], ln_weight=lw, ln_bias=lb, gelu=True)
        x2 = ops.decode_linear(h, wm, tail_w[7], residual=x1)
        return ops.decode_linear(x2, tail_w[10], None, ln_weight=lw, ln_bias=lb)

    out["decode_tail (one launch)"] = lambda: ops.decode_tail(yr, xr, tail_w)
    out["four decode_linear (one row)"] = tail_four
    out["window_mlp (one launch)"] = lambda: ops.window_mlp(
        y, r, wp, None, wf, None, wm, ln_weight=lw, ln_bias=lb
    )
    out["three decode_linear"] = mlp_three
    out["three decode_linear (mlp.c_proj split K)"] = mlp_three_split
    # what the LayerNorm and the GELU cost inside mlp.c_fc's tensor-core call
    out["c_fc (LayerNorm, GELU)"] = lambda: ops.decode_linear(
        r, wf, None, ln_weight=lw, ln_bias=lb, gelu=True
    )
    out["c_fc (GELU)"] = lambda: ops.decode_linear(r, wf, None, gelu=True)
    out["c_fc"] = lambda: ops.decode_linear(r, wf, None)
    hw = rnd(T, 4 * C)
    out["mlp.c_proj"] = lambda: ops.decode_linear(hw, wm, None, residual=r)
    out["mlp.c_proj (split K)"] = lambda: ops.decode_linear(hw, wm, None, residual=r, split_k=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--once", action="store_true", help="each candidate once (for ncu)")
    args = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = {}
    for preset, (nh, T, hs) in SHAPES.items():
        cands = candidates(nh, T, hs, g)
        if args.once:
            for fn in cands.values():
                fn()
            continue
        times = {k: [] for k in cands}
        for _ in range(3):  # alternate them
            for k, fn in cands.items():
                times[k] += graph_us(fn, args.calls, args.rounds)
        rows[preset] = {k: statistics.median(v) for k, v in times.items()}
        for k, v in rows[preset].items():
            print(f"{preset:17s} {k:34s} {v:6.2f} us", flush=True)
    torch.cuda.synchronize()
    if args.json and not args.once:
        write_record(args.json, "window-parts-bench", args, us_per_call=rows)


if __name__ == "__main__":
    main()
