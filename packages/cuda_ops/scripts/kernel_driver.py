"""GPU driver of gptstack.cuda_ops for scripts/gpu_check.sh (also runs on a CPU as a dry run).

    python kernel_driver.py once                 one call of every kernel and variant (for
                                                 compute-sanitizer), each checked against torch
    python kernel_driver.py step --out F.json [--preset esp32 ...] [--compile]
                                                 training forward+backward, ops=torch vs
                                                 ops=gptstack: median time, ratio, peak memory

`step` follows docs/MEASURING.md: same weights and batch for both, warm-up, the two variants
alternated (A B A B ...) with CUDA events, median and min-max of each, median of the pairwise
ratios; peak memory is torch.cuda.max_memory_allocated over one step above what the model
holds before it. The JSON is rewritten after each preset, so a time limit keeps what finished.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import gptstack.cuda_ops as ops
from gptstack.cuda_ops.testing import assert_close

PRESETS = ["esp32", "shakespeare-char", "gpt2-124m"]
WARMUP, ROUNDS = 3, 20  # docs/MEASURING.md rule 3: at least 20 repeats under a second


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def once() -> None:
    """Every kernel once, each variant (128-bit and scalar) at least once, checked."""
    dev = _device()
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, device=dev).to(dtype)

    for dtype in (torch.float32, torch.bfloat16):
        # 128-bit path; 64-bit path (bf16 LayerNorm backward); C % 8 != 0: scalar path
        for shape in ((64, 768), (64, 384), (3, 37)):
            x, dy = rnd(*shape, dtype=dtype).requires_grad_(), rnd(*shape, dtype=dtype)
            w = (1 + 0.1 * rnd(shape[1], dtype=dtype)).requires_grad_()
            b = (0.1 * rnd(shape[1], dtype=dtype)).requires_grad_()
            r = rnd(*shape, dtype=torch.bfloat16)
            y = ops.gelu_tanh(x)
            ref = F.gelu(x.detach().float(), approximate="tanh")
            assert_close(y, ref, dtype, f"gelu {shape} {dtype}")
            torch.autograd.grad(y, x, dy)
            y = ops.layernorm(x, w, b)
            assert_close(
                y,
                F.layer_norm(x.detach().float(), shape[-1:], w.float(), b.float()),
                dtype,
                f"layernorm {shape} {dtype}",
            )
            torch.autograd.grad(y, (x, w, b), dy)
            s, y = ops.add_layernorm(x, r, w, b)
            torch.autograd.grad((s, y), (x, w, b), (dy, dy))
        # 128-bit rows (in bf16 on sm_90+ the staged kernel: 300 rows walk both of its buffers
        # on 132 SMs); V % 8 != 0: scalar rows
        for V in (50304, 101):
            z = (2 * rnd(300, V, dtype=dtype)).requires_grad_()
            t = torch.randint(0, V, (300,), generator=g, device=dev)
            t[3] = -1
            loss = ops.cross_entropy(z, t)
            assert_close(
                loss,
                F.cross_entropy(z.detach().float(), t, ignore_index=-1),
                dtype,
                f"cross_entropy V={V} {dtype}",
            )
            torch.autograd.grad(loss, z)
        h = rnd(70, 64, dtype=dtype).requires_grad_()
        w = (0.1 * rnd(1001, 64, dtype=dtype)).requires_grad_()
        t = torch.randint(0, 1001, (70,), generator=g, device=dev)
        torch.autograd.grad(ops.linear_cross_entropy(h, w, t, chunk_rows=32), (h, w))
        # 16-byte weight rows (vector loads); K % 8 != 0: scalar loads; 40 rows: in bf16 on
        # CUDA the tensor-core kernel (decode_mma.cuh), with row and column tails
        for R, K in ((2, 384), (2, 37), (40, 384)):
            x, w = rnd(R, K, dtype=dtype), rnd(100, K, dtype=dtype) / K**0.5
            lw, lb, res = (
                1 + 0.1 * rnd(K, dtype=dtype),
                rnd(K, dtype=dtype),
                rnd(R, 100, dtype=dtype),
            )
            y = ops.decode_linear(x, w, None, ln_weight=lw, ln_bias=lb, residual=res, gelu=True)
            h = F.layer_norm(x.float(), (K,), lw.float(), lb.float())
            ref = F.gelu(h @ w.float().t(), approximate="tanh") + res.float()
            assert_close(y, ref, dtype, f"decode_linear R={R} K={K} {dtype}")
        qkv = rnd(2, 3 * 6 * 64, dtype=dtype)
        kc, vc = rnd(2, 6, 256, 64, dtype=dtype), rnd(2, 6, 256, 64, dtype=dtype)
        ops.decode_attention(qkv, kc, vc, torch.tensor(200, device=dev))
        # a short window's c_attn + attention: one launch in bf16 on CUDA (window_attention.cuh),
        # two sequences of 40 rows (tails of the 64-row tile)
        x, w = rnd(2, 40, 256, dtype=dtype), rnd(768, 256, dtype=dtype) / 16
        lw, lb = 1 + 0.1 * rnd(256, dtype=dtype), rnd(256, dtype=dtype)
        y = ops.window_attention(x, w, None, ln_weight=lw, ln_bias=lb, n_head=8)
        qkv = F.linear(F.layer_norm(x.float(), (256,), lw.float(), lb.float()), w.float())
        q, k, v = (t.view(2, 40, 8, 32).transpose(1, 2) for t in qkv.split(256, dim=2))
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        assert_close(y, ref.reshape(2, 40, 256), dtype, f"window_attention {dtype}")
        # with c_proj too: in bf16 on CUDA a cluster of the 8 heads (window_attention.cuh)
        wp, bp = rnd(256, 256, dtype=dtype) / 16, rnd(256, dtype=dtype)
        x1 = ops.window_attention(x, w, None, ln_weight=lw, ln_bias=lb, n_head=8,
                                  proj_weight=wp, proj_bias=bp)  # fmt: skip
        ref = ops.decode_linear(y.view(80, 256), wp, bp, residual=x.view(80, 256))
        assert_close(x1.view(80, 256), ref, dtype, f"window_attention + c_proj {dtype}")
        # then the rest of its block, c_proj + ln_2 + c_fc + mlp.c_proj: one launch in bf16 on
        # CUDA (window_mlp.cuh), against the three decode_linear calls it stands for
        y, x = y.view(80, 256), x.view(80, 256)
        wf = rnd(1024, 256, dtype=dtype) / 16
        wm = rnd(256, 1024, dtype=dtype) / 32
        out = ops.window_mlp(y, x, wp, None, wf, None, wm, ln_weight=lw, ln_bias=lb)
        x1 = ops.decode_linear(y, wp, None, residual=x)
        h = ops.decode_linear(x1, wf, None, ln_weight=lw, ln_bias=lb, gelu=True)
        ref = ops.decode_linear(h, wm, None, residual=x1)
        assert_close(out, ref, dtype, f"window_mlp {dtype}")
        # its mlp.c_proj with K split over a cluster of 4 CTAs (decode_split.cuh)
        out = ops.decode_linear(h, wm, None, residual=x1, split_k=True)
        assert_close(out, ref, dtype, f"decode_linear split_k {dtype}")
        C, nh, L = 384, 6, 2  # every block of a step in one call (a cluster on sm_90)
        shapes = [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C),
                  (4 * C,), (C, 4 * C), (C,)]  # fmt: skip
        layers = [rnd(*s, dtype=dtype) / 20 for _ in range(L) for s in shapes]
        kc, vc = rnd(L, 1, nh, 256, 64, dtype=dtype), rnd(L, 1, nh, 256, 64, dtype=dtype)
        wte, wpe = rnd(65, C, dtype=dtype), rnd(256, C, dtype=dtype)
        tok = torch.tensor([[3]], device=dev)
        x = ops.decode_blocks(tok, torch.tensor(200, device=dev), wte, wpe, layers, kc, vc)
        assert x.isfinite().all(), "decode_blocks"
        want = wte[3] + wpe[200]
        assert torch.equal(ops.decode_embed(tok, torch.tensor(200, device=dev), wte, wpe)[0], want)
        window = torch.randint(0, 65, (2, 256), device=dev)
        x = ops.window_embed(window, torch.tensor([[3], [4]], device=dev), wte, wpe)
        assert torch.equal(x[1, -1], wte[4] + wpe[255]), "window_embed"
        out, token = torch.zeros(2, 8, dtype=torch.long, device=dev), window[:, :1].clone()
        for slide in (False, True):  # the decoder's state after a token, at pos 255 / sliding
            pos, new = torch.tensor(255, device=dev), torch.tensor([5, 6], device=dev)
            ops.decode_advance(new, ops.DecoderState(out, 7, token, window, pos, slide))
            logits = rnd(2, 65, dtype=dtype)  # the sampler's last block updates it instead
            new = ops.sample_tokens(
                logits,
                ops.sampler_state(3, dev),
                top_k=5,
                advance=ops.DecoderState(out, 6, token, window, pos, slide),
            )
        assert out[:, 7].tolist() == [5, 6] and torch.equal(out[:, 6], new), "decode_advance"
        for V, top_k in ((65, 40), (50304, 200), (513, None)):  # select + race; race alone
            logits = 3 * rnd(3, V, dtype=dtype)
            state = ops.sampler_state(7, dev)
            tokens = ops.sample_tokens(logits, state, temperature=0.8, top_k=top_k)
            kept = logits.float().topk(top_k or V, dim=1).values[:, -1]
            assert (logits.float().gather(1, tokens[:, None])[:, 0] >= kept).all(), "top-k"
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"once: every kernel ran and matched torch on {dev}")


def _time_pair(steps: dict, device: torch.device) -> dict:
    """Alternate the step functions; per-variant samples (s) and pairwise ratios vs 'torch'."""
    names = list(steps)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(WARMUP):
        for n in names:
            steps[n]()
    for _ in range(ROUNDS):
        for n in names:
            if device.type == "cuda":
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                steps[n]()
                end.record()
                end.synchronize()
                samples[n].append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                steps[n]()
                samples[n].append(time.perf_counter() - t0)
    base = samples["torch"]
    out = {}
    for n in names:
        s = samples[n]
        out[n] = {
            "median_s": statistics.median(s),
            "min_s": min(s),
            "max_s": max(s),
            "samples_s": s,
            "speedup_vs_torch": statistics.median(b / a for a, b in zip(s, base)),
        }
    return out


def _train_step(fwd, model, x, y, amp):
    """forward (autocast) + backward, grads dropped: the part of a step that the ops change."""

    def run():
        with amp:
            loss = fwd(x, y)[1]
        loss.backward()
        model.zero_grad(set_to_none=True)

    return run


def _peak_bytes(step, device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def step(presets: list[str], out: str, compile_models: bool, smoke: bool) -> None:
    from gptstack.model import GPT, GPTConfig
    from gptstack.tools.bench_cli import preset_shape

    dev = _device()
    result = {
        "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "build_info": ops.build_info(),
        "command": " ".join(sys.argv),
        "commit": os.environ.get("GPTSTACK_GIT_COMMIT"),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": [],
    }
    for name in presets:
        shape = preset_shape(name)
        shape = shape.smoke() if smoke else shape
        cfg = shape.config()
        torch.manual_seed(0)
        models = {"torch": GPT(cfg).to(dev)}
        models["gptstack"] = GPT(GPTConfig(**{**cfg.to_dict(), "ops": "gptstack"})).to(dev)
        models["gptstack"].load_state_dict(models["torch"].state_dict())
        B, T, V = shape.batch_size, shape.block_size, shape.vocab_size
        x = torch.randint(0, V, (B, T), device=dev)
        y = torch.randint(0, V, (B, T), device=dev)
        amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")
        losses = {}
        for n, m in models.items():  # the same function: eval mode (no dropout), one batch
            m.eval()
            with torch.no_grad(), amp:
                losses[n] = m(x, y)[1].float().item()
            m.train()
        fwd = {n: (torch.compile(m) if compile_models else m) for n, m in models.items()}

        steps = {n: _train_step(fwd[n], models[n], x, y, amp) for n in models}
        t0 = time.time()
        timing = _time_pair(steps, dev)
        row = {
            "preset": name,
            "B": B,
            "T": T,
            "V": V,
            "compile": compile_models,
            "dtype": "bf16 autocast" if dev.type == "cuda" else "fp32",
            "eval_loss": losses,
            "timing": timing,
            "peak_bytes": {n: _peak_bytes(s, dev) for n, s in steps.items()},
            "wall_s": time.time() - t0,
        }
        result["rows"].append(row)
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, out)
        pk = row["peak_bytes"]
        mem = (
            f", peak {pk['torch'] / 2**30:.2f} -> {pk['gptstack'] / 2**30:.2f} GiB"
            if pk["torch"]
            else ""
        )
        print(
            f"step {name}{' compiled' if compile_models else ''}: torch "
            f"{timing['torch']['median_s'] * 1e3:.2f} ms, gptstack "
            f"{timing['gptstack']['median_s'] * 1e3:.2f} ms "
            f"({timing['gptstack']['speedup_vs_torch']:.3f}x){mem}; eval loss "
            f"{losses['torch']:.4f} vs {losses['gptstack']:.4f}",
            flush=True,
        )
        del models, fwd, steps
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("once")
    s = sub.add_parser("step")
    s.add_argument("--out", required=True)
    s.add_argument("--preset", action="append", dest="presets")
    s.add_argument("--compile", action="store_true", help="torch.compile both models")
    s.add_argument("--smoke", action="store_true", help="tiny shapes (a CPU dry run)")
    a = p.parse_args()
    if a.cmd == "once":
        once()
    else:
        step(a.presets or PRESETS, a.out, a.compile, a.smoke)


if __name__ == "__main__":
    main()
