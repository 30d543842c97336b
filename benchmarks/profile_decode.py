"""Where batch-1 decoding spends its time: the graph decoder's two kinds of step, side by side.

    python3 benchmarks/profile_decode.py --ckpt RUN [--ckpt RUN2] --out DIR

Under the default window ("slide"), a generation has two phases: while the context is not full,
each token is one cached decode step (one new position through the model); once it is full,
each token re-runs the whole window (the absolute positions shift, so nothing cached can be
reused: naive's rule, nanoGPT's). This script times both phases apart for each one-token step
(kernels "torch" = PyTorch's modules, "gptstack" = the fused decode kernels and sampler,
"gptstack-rows-window" = the same with the slide window's matrices through decode_linear's
tensor-core kernel at any width (LayerNorm, GELU and residual inside it; by default only up to
fused_step.WINDOW_ROWS rows) instead of cuBLAS matmuls between LayerNorm and GELU kernels,
"gptstack-one-launch" = the cached step's blocks as one decode_blocks launch instead of op by
op, "gptstack-sdpa-window" = SDPA for the slide window's attention, "gptstack-plain-window" =
the slide window without cuBLASLt's GELU epilogue and the last-row attention
(fused_step.WINDOW_EPILOGUES off),
"gptstack-split-attention" = the window's attention by the opt-in split-keys kernel instead
of the 4-warp one, "gptstack-torch-io" = the fed ids' embedding and the state update after
each token by PyTorch's ops instead of decode_embed / window_embed / decode_advance
(fused_step.IO_KERNELS off), "gptstack-separate-advance" = the state updated by a
decode_advance launch after the sampler instead of by the sampler's last block
(fused_step.ADVANCE_IN_SAMPLER off), "gptstack-two-launch-attention" = a short
slide window's c_attn and attention as two launches instead of one window_attention launch
(fused_step.WINDOW_ATTENTION off), "gptstack-c_proj-in-attention" = its attn.c_proj inside
window_attention's launch (fused_step.WINDOW_ATTENTION_PROJ on: opt-in), "gptstack-unsplit-k" =
its mlp.c_proj by decode_linear's unsplit kernel (fused_step.WINDOW_SPLIT_K off),
"gptstack-one-launch-tail" = a step's last block after attention and the LM head as one
decode_tail launch, not four decode_linear launches (fused_step.TAIL on: opt-in),
"gptstack-embedded-window" = its ids embedded inside the first block's window_attention launch,
not by a window_embed launch before it (fused_step.WINDOW_EMBED_IN_ATTENTION on: opt-in),
"gptstack-one-launch-mlp" = the rest of its blocks after attention (c_proj, ln_2, MLP) as one
window_mlp launch instead of three decode_linear launches (fused_step.WINDOW_MLP on: opt-in),
"gptstack-gelu-kernel" = a bias-free model's window GELU as
a kernel instead of cuBLASLt's epilogue with a zero bias (fused_step.ZERO_BIAS_EPILOGUE off);
--configs picks them), alternating the configurations
over rounds (medians; the prompt's prefill, timed alone, is taken out of the decode phase), and
writes a torch.profiler kernel table of one 500-token generation per configuration:
`profile-decode-<run>.json` and `profile-decode-<run>-<kernels>.txt` in DIR.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from gptstack.bench.environment import environment
from gptstack.cuda_ops.attention import cuda_variant
from gptstack.model import GraphDecoder
from gptstack.model.fused_step import blocks_reason
from gptstack.tools.checkpoint import load_checkpoint

# The configurations that differ from "gptstack" by one FusedDecodeStep switch (the docstring
# says what each one runs): the switch and its value
STEP_SWITCHES = {
    "gptstack-sdpa-window": ("native_attention", False),
    "gptstack-plain-window": ("window_epilogues", False),
    "gptstack-gelu-kernel": ("zero_bias_epilogue", False),
    "gptstack-two-launch-attention": ("window_attention", False),
    "gptstack-c_proj-in-attention": ("window_attention_proj", True),
    "gptstack-one-launch-tail": ("tail", True),
    "gptstack-embedded-window": ("window_embed_in_attention", True),
    "gptstack-unsplit-k": ("window_split_k", False),
    "gptstack-one-launch-mlp": ("window_mlp", True),
    "gptstack-torch-io": ("io_kernels", False),
}


def timed(decoder: GraphDecoder, idx: torch.Tensor, n: int, seed: int = 1) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in decoder.generate(idx, n, temperature=0.8, top_k=40, seed=seed):
        pass
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", type=Path, action="append", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--slide-tokens", type=int, default=256)
    ap.add_argument("--configs", default="torch,gptstack,gptstack-rows-window")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for run in args.ckpt:
        ckpt = load_checkpoint(run, device="cuda")
        model = ckpt.model.to(torch.bfloat16).eval()
        T = model.config.block_size
        idx = torch.tensor([ckpt.tokenizer.encode("ROMEO:")], device="cuda")
        fill = T - idx.size(1)  # tokens decoded before the window is full
        decoders = {
            k: GraphDecoder(model, 1, fused=(k != "torch")) for k in args.configs.split(",")
        }
        # the cached step's blocks as one decode_blocks launch (opt-in), not five launches each
        if "gptstack-one-launch" in decoders:
            reason = blocks_reason(model, model.wte.weight.device)
            if reason is None:
                decoders["gptstack-one-launch"].step.blocks_in_one_launch = True
            else:
                print(f"{run.name}: gptstack-one-launch runs op by op: {reason}", flush=True)
        for k, (attr, value) in STEP_SWITCHES.items():
            if k in decoders:
                setattr(decoders[k].step, attr, value)
        if "gptstack-separate-advance" in decoders:
            decoders["gptstack-separate-advance"].advance_in_sampler = False
        if "gptstack-rows-window" in decoders:
            step = decoders["gptstack-rows-window"].step
            step.window_rows = 1 << 30 if step.rows_kernel_runs() else 0  # at any width
            if not step.window_rows:
                print(f"{run.name}: gptstack-rows-window runs cuBLAS matmuls (not bf16?)")
        for k, d in decoders.items():  # capture every graph both phases need
            # the attention kernel is chosen when a graph is captured, so the variant holds here
            with cuda_variant(forward_warps="split" if k == "gptstack-split-attention" else 0):
                timed(d, idx, fill + 64)
        rows = {k: {"first_s": [], "fill_s": [], "fill_slide_s": []} for k in decoders}
        for _ in range(args.rounds):
            for k, d in decoders.items():
                rows[k]["first_s"].append(timed(d, idx, 1))  # the prompt's prefill + 1 token
                rows[k]["fill_s"].append(timed(d, idx, fill))
                rows[k]["fill_slide_s"].append(timed(d, idx, fill + args.slide_tokens))
        result = {"run": str(run), "block_size": T, "prompt_tokens": idx.size(1), "configs": {}}
        for k, r in rows.items():
            first_s = statistics.median(r["first_s"])
            fill_s, both_s = statistics.median(r["fill_s"]), statistics.median(r["fill_slide_s"])
            decode_us = 1e6 * (fill_s - first_s) / (fill - 1)
            slide_us = 1e6 * (both_s - fill_s) / args.slide_tokens
            result["configs"][k] = {"decode_step_us": decode_us, "slide_step_us": slide_us, **r}
            print(f"{run.name:18s} {k:9s} decode step {decode_us:7.1f} us   slide step "
                  f"{slide_us:7.1f} us", flush=True)  # fmt: skip
            d = decoders[k]
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                timed(d, idx, 500)
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30)
            kernels = sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")
            result["configs"][k]["cuda_events_per_500_tokens"] = kernels
            (args.out / f"profile-decode-{run.name}-{k}.txt").write_text(table)
        result["device"] = torch.cuda.get_device_name()
        result["torch"] = torch.__version__
        result["environment"] = environment(torch.device("cuda"), command=sys.argv)
        (args.out / f"profile-decode-{run.name}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
