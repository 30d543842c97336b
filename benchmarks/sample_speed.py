"""Decoding speed through `gptstack sample`'s own code path, every decoder side by side.

    python3 benchmarks/sample_speed.py --ckpt RUN [--ckpt RUN2 ...] --out DIR [--tokens 500]
    python3 benchmarks/sample_speed.py --device cpu --ckpt RUN --out DIR   # the CPU configs

Loads each checkpoint once and calls gptstack.tools.sample.sample() -- exactly what the CLI runs
-- for each configuration, alternating the configurations over several rounds
(docs/MEASURING.md rule
2), and records steady-state tokens/s and start-up per configuration (medians over rounds) as
one JSON per checkpoint: `sample-speed-<run>.json`. The first round of each configuration pays
its graph capture / compilation; later rounds reuse nothing (each call builds its decoder), so
start-up is measured every round. Greedy text is compared with naive's in fp32 only (bf16
weights are another function).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from gptstack.bench.environment import environment
from gptstack.model import fused_step
from gptstack.tools import threads
from gptstack.tools.checkpoint import load_checkpoint
from gptstack.tools.sample import sample

CONFIGS = {  # name -> sample() options
    "naive": {"mode": "naive", "dtype": "fp32"},
    "kv": {"mode": "kv", "dtype": "fp32"},
    "static": {"mode": "static", "dtype": "fp32"},
    "graph fp32 torch": {"mode": "graph", "dtype": "fp32", "kernels": "torch"},
    "graph bf16 torch": {"mode": "graph", "dtype": "bf16", "kernels": "torch"},
    "graph bf16 torch+compile": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "torch",
        "compile": True,
    },
    # the fused one-token step (gptstack.cuda_ops decode kernels): the CLI's default on CUDA
    "graph fp32 fused": {"mode": "graph", "dtype": "fp32", "kernels": "gptstack"},
    "graph bf16 fused": {"mode": "graph", "dtype": "bf16", "kernels": "gptstack"},
    # the same step with PyTorch's sampling ops (the default before sample_tokens)
    "graph bf16 fused torch-sampler": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "fused_sampling": False,
    },
    # decode_linear's one-row kernel with its row in registers (the LayerNorm folded onto the
    # weight rows; csrc/decode_linear.cuh) for rows up to 2,048 / 1,024 / 384 / 256 wide, instead of
    # through shared memory (the default: csrc/decode.h's kLinearRegistersMaxK = 0). Recorded
    # runs of 2026-12-06 named "shared-rows" the shared-memory rows of a build whose default
    # was 2,048.
    **{
        f"graph bf16 fused registers{'' if max_k == 2048 else f'-{max_k}'}": {
            "mode": "graph",
            "dtype": "bf16",
            "kernels": "gptstack",
            "registers_max_k": max_k,
        }
        for max_k in (2048, 1024, 384, 256)
    },
    # the fused kernels launched the ordinary way (no programmatic dependent launch)
    "graph bf16 fused no-PDL": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "programmatic_launch": False,
    },
    # the slide window's matrices through decode_linear's tensor-core kernel (LayerNorm, GELU
    # and residual fused: 5 launches a block) at any width (by default up to
    # fused_step.WINDOW_ROWS rows), or through cuBLAS matmuls between LayerNorm and GELU
    # kernels (7) at any width
    "graph bf16 fused rows-window": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "window_rows": 1 << 30,
    },
    "graph bf16 fused cublas-window": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "window_rows": 0,
    },
    # the slide window's c_attn and attention as two launches (decode_linear, causal_attention)
    # instead of one window_attention launch where the window is short
    # (fused_step.WINDOW_ATTENTION)
    "graph bf16 fused two-launch-attention": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "window_attention": False,
    },
    # the slide window's attn.c_proj inside window_attention's launch (a cluster of the heads)
    # instead of a decode_linear launch of its own (fused_step.WINDOW_ATTENTION_PROJ on; opt-in:
    # it lost)
    "graph bf16 fused c_proj-in-attention": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "window_attention_proj": True,
    },
    # a step's last block after attention and the LM head as one decode_tail launch instead of
    # four decode_linear launches (fused_step.TAIL on; opt-in: it lost)
    "graph bf16 fused one-launch-tail": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "tail": True,
    },
    # the slide window's ids embedded inside the first block's window_attention launch instead of
    # by a window_embed launch (fused_step.WINDOW_EMBED_IN_ATTENTION on; opt-in: it lost)
    "graph bf16 fused embedded-window": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "window_embed_in_attention": True,
    },
    # the slide window's mlp.c_proj by decode_linear's unsplit kernel (8 CTAs at esp32) instead
    # of with its K over a cluster of 4 CTAs a tile (fused_step.WINDOW_SPLIT_K)
    "graph bf16 fused unsplit-k": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "window_split_k": False,
    },
    # the rest of the slide window's blocks after attention (c_proj, ln_2, MLP) as one
    # window_mlp launch instead of three decode_linear launches where the model is narrow
    # (fused_step.WINDOW_MLP on; opt-in: it lost)
    "graph bf16 fused one-launch-mlp": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "window_mlp": True,
    },
    # the slide window as before 2026-12-06 (fused_step.WINDOW_EPILOGUES off): a GELU kernel
    # after the MLP's first matmul, and the last block's attention computed for every row
    "graph bf16 fused plain-window": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "window_epilogues": False,
    },
    # the fed ids' embedding and the decoder's state update after each token by PyTorch's ops
    # (index_select, add, index_copy, copies) instead of cuda_ops' kernels (fused_step.IO_KERNELS)
    "graph bf16 fused torch-io": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "io_kernels": False,
    },
    # the decoder's state updated by a decode_advance launch after cuda_ops' sampler instead of
    # by the sampler's last block (fused_step.ADVANCE_IN_SAMPLER)
    "graph bf16 fused separate-advance": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "advance_in_sampler": False,
    },
    # a model without biases (shakespeare-char's preset) keeps the window's GELU as a kernel
    # instead of cuBLASLt's bias + GELU epilogue with zeros (fused_step.ZERO_BIAS_EPILOGUE)
    "graph bf16 fused gelu-kernel": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "zero_bias_epilogue": False,
    },
    # the slide window's attention by the opt-in split-keys kernel instead of the 4-warp one
    "graph bf16 fused split-attention": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "attention_warps": "split",
    },
    # the fused step's blocks as one decode_blocks launch (opt-in), not op by op
    "graph bf16 fused one-launch": {
        "mode": "graph",
        "dtype": "bf16",
        "kernels": "gptstack",
        "one_launch": True,
    },
}
# on a CPU (--device cpu): the KV-cache decoder as `gptstack sample` runs it there ("kv auto":
# bf16 weights where the CPU has native bf16, else fp32, since 2026-12-06; fp32 before), with
# the threads switched to every core once the slide window is full (threads.DecodeThreads),
# and with the first phase's one thread throughout (the policy before 2026-12-05)
CPU_CONFIGS = {
    "kv auto": {"mode": "kv"},
    "kv fp32": {"mode": "kv", "dtype": "fp32"},
    "kv fp32 one thread": {"mode": "kv", "dtype": "fp32", "threads_by_phase": False},
    "kv bf16": {"mode": "kv", "dtype": "bf16"},
    # the static-cache decoder, and the graph decoder run eagerly (static cache, 32-token
    # chunks, PyTorch's modules)
    "static auto": {"mode": "static"},
    "graph auto": {"mode": "graph"},
    "graph fp32": {"mode": "graph", "dtype": "fp32"},
}
# A config's options that set a fused_step module switch (the A/B switches the decoder reads when
# it is made), and those switches' defaults, restored after each config
FUSED_STEP_SWITCHES = {
    "one_launch": "ONE_LAUNCH",
    "window_rows": "WINDOW_ROWS",
    "window_epilogues": "WINDOW_EPILOGUES",
    "window_attention": "WINDOW_ATTENTION",
    "window_attention_proj": "WINDOW_ATTENTION_PROJ",
    "window_mlp": "WINDOW_MLP",
    "window_split_k": "WINDOW_SPLIT_K",
    "window_embed_in_attention": "WINDOW_EMBED_IN_ATTENTION",
    "tail": "TAIL",
    "io_kernels": "IO_KERNELS",
    "advance_in_sampler": "ADVANCE_IN_SAMPLER",
    "zero_bias_epilogue": "ZERO_BIAS_EPILOGUE",
}
FUSED_STEP_DEFAULTS = {name: getattr(fused_step, name) for name in FUSED_STEP_SWITCHES.values()}


def set_fused_step(options: dict) -> None:
    """Each fused_step switch to the value options gives it (popped), else its default."""
    for option, name in FUSED_STEP_SWITCHES.items():
        setattr(fused_step, name, options.pop(option, FUSED_STEP_DEFAULTS[name]))


def attention_variant(forward_warps: int | str):
    """The cuda_ops attention forward's CTA size for the block (0: the launcher's choice)."""
    if not forward_warps:
        return contextlib.nullcontext()
    from gptstack.cuda_ops.attention import cuda_variant

    return cuda_variant(forward_warps=forward_warps)


# A config's options that set a switch of the extension (gptstack.cuda_ops._C: option ->
# (setter, getter)); the build's values, read before the first change, are restored after each
# config. A build made before a switch existed has neither: a config that asks for it fails.
EXTENSION_SWITCHES = {
    "programmatic_launch": ("set_programmatic_launch", "programmatic_launch"),
    "registers_max_k": ("set_linear_registers_max_k", "linear_registers_max_k"),
}
_EXTENSION_DEFAULTS: dict[str, object] = {}


def set_extension_switches(options: dict) -> None:
    """Each extension switch to the value options gives it (popped), else the build's value."""
    try:
        from gptstack.cuda_ops import _C
    except ImportError:  # no extension (a CPU-only run without the build): nothing to switch
        for option in EXTENSION_SWITCHES:
            options.pop(option, None)
        return
    for option, (setter, getter) in EXTENSION_SWITCHES.items():
        if not hasattr(_C, getter):
            if option in options:
                raise RuntimeError(f"this build of gptstack.cuda_ops has no {option} switch")
            continue
        _EXTENSION_DEFAULTS.setdefault(option, getattr(_C, getter)())
        getattr(_C, setter)(options.pop(option, _EXTENSION_DEFAULTS[option]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", type=Path, action="append", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokens", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--configs", default=None, help="default: every config of the device")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    configs = CONFIGS if args.device == "cuda" else CPU_CONFIGS
    names = (args.configs or ",".join(configs)).split(",")
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise SystemExit(f"--configs {unknown} on {args.device}: choose from {', '.join(configs)}")
    for run in args.ckpt:
        rows = {n: {"tokens_per_s": [], "startup_s": [], "text": None} for n in names}
        for r in range(args.rounds):
            for n in names:
                # sample() casts the model to the configuration's dtype: load it fresh
                ckpt = load_checkpoint(run, device=args.device)
                options = dict(configs[n])
                threads.BY_PHASE = options.pop("threads_by_phase", True)
                set_extension_switches(options)
                set_fused_step(options)
                attention = attention_variant(options.pop("attention_warps", 0))
                try:
                    with attention:
                        res = sample(
                            ckpt, "ROMEO:", tokens=args.tokens, seed=1, out=None, **options
                        )
                    if fused_step.ONE_LAUNCH and not res.one_launch:  # the name says what ran
                        model = ckpt.model  # as sample() cast it
                        reason = fused_step.blocks_reason(model, model.wte.weight.device)
                        raise RuntimeError(f"decode_blocks did not run: {reason or 'op by op'}")
                    if r == 0:
                        with attention_variant(configs[n].get("attention_warps", 0)):
                            rows[n]["greedy_text"] = sample(
                                ckpt, "ROMEO:", tokens=100, temperature=0, out=None, **options
                            ).text
                except Exception as e:  # a failing configuration is a result, not a crash
                    rows[n]["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    print(f"{run.name} {n}: {rows[n]['error']}", flush=True)
                    continue
                finally:
                    set_extension_switches({})
                    set_fused_step({})
                    threads.BY_PHASE = True
                rows[n]["tokens_per_s"].append(res.tokens_per_s)
                rows[n]["dtype"] = res.dtype  # what "auto" resolved to
                rows[n]["startup_s"].append(res.startup_s)
                print(
                    f"{run.name:18s} {n:26s} round {r}: {res.tokens_per_s:10,.0f} tok/s, "
                    f"start-up {res.startup_s:.3f} s",
                    flush=True,
                )
        ref = rows.get("naive", {}).get("greedy_text")
        summary = {}
        for n, row in rows.items():
            if not row["tokens_per_s"]:
                summary[n] = row
                continue
            summary[n] = {
                "tokens_per_s_median": statistics.median(row["tokens_per_s"]),
                "startup_s_median": statistics.median(row["startup_s"]),
                "startup_s_first": row["startup_s"][0],
                "greedy_equals_naive": (
                    row.get("greedy_text") == ref
                    if ref is not None and configs[n].get("dtype") == "fp32"
                    else None
                ),
                **row,
            }
            print(
                f"{run.name:18s} {n:26s} {summary[n]['tokens_per_s_median']:10,.0f} tok/s  "
                f"start-up {summary[n]['startup_s_median']:.3f} s (first "
                f"{summary[n]['startup_s_first']:.2f} s)  greedy==naive "
                f"{summary[n]['greedy_equals_naive']}"
            )
        suffix = "-cpu" if args.device == "cpu" else ""
        (args.out / f"sample-speed-{run.name}{suffix}.json").write_text(
            json.dumps(
                {
                    "kind": "sample-speed",
                    "run": str(run),
                    "tokens": args.tokens,
                    "device": (torch.cuda.get_device_name() if args.device == "cuda" else "cpu"),
                    "torch": torch.__version__,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "environment": environment(torch.device(args.device), command=sys.argv),
                    "configs": summary,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
