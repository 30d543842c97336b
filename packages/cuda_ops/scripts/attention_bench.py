"""Causal attention on the GPU: gptstack.cuda_ops against every SDPA backend, side by side.

    python packages/cuda_ops/scripts/attention_bench.py --out $OUT           # on the H200
    python packages/cuda_ops/scripts/attention_bench.py --smoke --device cpu  # checks the script

Section "kernels", for each preset shape in bf16 (esp32 B64 nh8 T64 hs32, shakespeare-char B64
nh6 T256 hs64, gpt2-124m B16 nh12 T1024 hs64; from the presets' TOML), at dropout 0 and at the
preset's training dropout: the forward, and the forward plus backward, as the model runs them
(q, k, v as views of one (B, T, 3C) c_attn output, y re-assembled to (B, T, C), gradients back
to that buffer). Candidates: gptstack's kernel with its defaults and each variant (warps per CTA
4 or 8; backward mode stages or atomic, csrc/attention_backward.cuh) and SDPA held to one backend
each by torch.nn.attention.sdpa_kernel (flash, efficient, cudnn, math). Section "steps", end to
end (docs/MEASURING.md rule 1): each preset's GPT, training mode with its dropout, bf16 autocast,
forward and backward of the loss, attention "sdpa" against "gptstack", same weights.

Every row is timed twice with gptstack.bench's harness (warm-up, rounds alternated in one
process, 3 rotating input sets, medians, per-round ratios): "eager" (CUDA events around one call,
host launch overhead included) and "graph" (captured in a CUDA graph and replayed: what a
captured training step sees). Outputs and gradients are checked first against float32 manual
attention (relative error < 1e-2, docs/MEASURING.md rule 5); a candidate that refuses a shape or
dropout is a skipped row with the reason. The result is a `gptstack bench` file (suite
"attention"): with --merge-into it is added to the newest matching result of
`gptstack bench attention` (one file comes back from the GPU instead of two), otherwise written
as attention-<device>-kernels-<date>.json in --out. A short table is printed last.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gptstack.bench import Column, Result, Settings, Variant, compare, validate_result
from gptstack.bench.environment import environment
from gptstack.bench.harness import error_text
from gptstack.bench.results import (
    load_result,
    make_row,
    ratio_entry,
    result_path,
    write_json_atomic,
)
from gptstack.cuda_ops import causal_attention
from gptstack.cuda_ops.attention import cuda_variant
from gptstack.model import manual_attention
from gptstack.tools.bench_cli import preset_shape

PRESETS = ("esp32", "shakespeare-char", "gpt2-124m")
SDPA_BACKENDS = {
    "sdpa flash": SDPBackend.FLASH_ATTENTION,
    "sdpa efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa math": SDPBackend.MATH,
}
# name -> cuda_variant(forward warps, backward warps, backward mode); 0 / "auto": the defaults
FORWARD_VARIANTS = {
    "gptstack": (0, 0, "auto"),
    "gptstack w4": (4, 0, "auto"),
    "gptstack w8": (8, 0, "auto"),
    "gptstack split": ("split", 0, "auto"),  # the split-keys forward (dropout-free only)
    "gptstack wgmma": ("wgmma", 0, "auto"),  # warpgroup MMA (sm_90 only)
}
STEP_VARIANTS = {
    "gptstack": (0, 0, "auto"),
    "gptstack w4 stages": (4, 4, "stages"),
    "gptstack w8 stages": (8, 8, "stages"),
    "gptstack w4 atomic": (4, 4, "atomic"),
    "gptstack w8 atomic": (8, 8, "atomic"),
    "gptstack wgmma": ("wgmma", "wgmma", "stages"),  # warpgroup MMA (sm_90 only)
}
INPUT_SETS = 3
CHECK_TOL = 1e-2  # bf16 against float32
GRAPH_CALLS = {"esp32": 20, "shakespeare-char": 10, "gpt2-124m": 2}  # calls per graph replay


def gptstack_candidate(variant, p):
    """(attend, scope) of gptstack's kernel in one variant at dropout p. The scope must cover
    the backward too: the backward kernel reads the variant when autograd runs it."""

    def attend(q, k, v):
        return causal_attention(q, k, v, dropout_p=p)

    return attend, lambda: cuda_variant(*variant)


def sdpa_candidate(backend, p):
    """(attend, scope) of SDPA held to one backend at dropout p."""

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)

    return attend, lambda: sdpa_kernel(backend)


def model_call(attend, qkv, nh):
    """The model's attention step around `attend`: split, heads, attend, re-assemble."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.view(B, T, nh, C // nh).transpose(1, 2) for t in qkv.split(C, dim=2))
    return attend(q, k, v).transpose(1, 2).contiguous().view(B, T, C)


def step_fn(candidate, nh, backward):
    """fn(inputs) for the harness: the forward, or the forward and the backward to qkv, all of
    it inside the candidate's scope (its kernel variant or SDPA backend)."""
    attend, scope = candidate

    def run(x):
        qkv, dout = x
        with scope():
            out = model_call(attend, qkv, nh)
            return (out, torch.autograd.grad(out, qkv, dout)[0]) if backward else out

    return run


def check(candidate, x, nh, backward) -> float:
    """Largest relative error of the output (and gradient) against float32 manual attention."""
    qkv, dout = x
    ref_qkv = qkv.detach().float().requires_grad_(backward)
    ref = model_call(manual_attention, ref_qkv, nh)
    got = step_fn(candidate, nh, backward)(x)
    pairs = [(got, ref)]
    if backward:
        pairs = [(got[0], ref), (got[1], torch.autograd.grad(ref, ref_qkv, dout.float())[0])]
    return max(((a.float() - b).norm() / b.norm()).item() for a, b in pairs)


def refusal(e: BaseException) -> str:
    """The error's first line, and the one it replaced (error_text: a failed CUDA-graph capture
    hides the error that broke it)."""
    return error_text(e)[:300]


def kernel_rows(shape, p, backward, timing, settings, device, gen):
    B, T, nh, hs = shape.batch_size, shape.block_size, shape.n_head, shape.head_size
    inputs = []
    for _ in range(INPUT_SETS):
        qkv = torch.randn(B, T, 3 * nh * hs, generator=gen).to(device, torch.bfloat16)
        dout = torch.randn(B, T, nh * hs, generator=gen).to(device, torch.bfloat16)
        inputs.append((qkv.requires_grad_(backward), dout))
    variants = STEP_VARIANTS if backward else FORWARD_VARIANTS
    cands = {n: gptstack_candidate(v, p) for n, v in variants.items()}
    cands.update({n: sdpa_candidate(b, p) for n, b in SDPA_BACKENDS.items()})
    checks, not_run = {}, {}
    for name, cand in cands.items():
        try:
            if p == 0:  # with dropout the masks differ by design: it must run and stay finite
                err = check(cand, inputs[0], nh, backward)
                checks[name] = {
                    "rel_err": err,
                    "tol": CHECK_TOL,
                    "ok": err < CHECK_TOL,
                    "against": "manual attention in float32",
                }
                if not err < CHECK_TOL:
                    not_run[name] = ("error", f"wrong result: relative error {err:.2e}")
            else:
                out = step_fn(cand, nh, backward)(inputs[0])
                if not all(torch.isfinite(t).all() for t in (out if backward else (out,))):
                    not_run[name] = ("error", "non-finite output with dropout")
        except Exception as e:  # noqa: BLE001 (a backend refusing this shape is a result)
            # SDPA refusing a shape is a skip; gptstack's kernel failing is an error
            not_run[name] = ("error" if name.startswith("gptstack") else "skipped", refusal(e))
    inner = GRAPH_CALLS.get(shape.name, 1) if timing == "cuda_graph" else 1
    vs = [
        Variant(n, step_fn(a, nh, backward), inputs, timing=timing, inner=inner)
        for n, a in cands.items()
        if n not in not_run
    ]
    with contextlib.nullcontext() if backward else torch.no_grad():
        cmp = compare(vs, settings, device=device)
    not_run.update({n: ("error", why) for n, why in cmp.failures.items()})
    kind = "graph" if timing == "cuda_graph" else "eager"
    pass_ = "fwd+bwd" if backward else "fwd"  # first: `gptstack bench summary` cuts groups
    group = f"{shape.name} {pass_} p={p} {kind} B={B} nh={nh} T={T} hs={hs}"
    params = {
        "model": shape.name,
        "batch": B,
        "n_head": nh,
        "seq_len": T,
        "head_size": hs,
        "dtype": "bf16",
        "dropout_p": p,
        "timing": kind,
        "pass": "forward+backward" if backward else "forward",
    }
    flops = 2 * B * nh * T * T * hs * (3.5 if backward else 1)  # causal half; backward = 2.5x
    return emit("kernels", group, params, cands, cmp, checks, not_run, flops)


def emit(section, group, params, names, cmp, checks, not_run, flops):
    """Rows of one comparison; ratios (> 1: faster) against the best SDPA and each backend."""
    ms = cmp.measurements
    sdpa = [n for n in ms if n.startswith("sdpa")]
    best = min(sdpa, key=lambda n: ms[n].stats["median"]) if sdpa else None
    rows = []
    for name in names:
        if name not in ms:
            status, note = not_run.get(name, ("error", "did not run"))
            rows.append(
                make_row(
                    section=section, group=group, name=name, params=params, status=status, note=note
                )
            )
            continue
        ratios = {}
        if best and name != best:
            ratios["vs_best_sdpa"] = ratio_entry(cmp, best, name)
        for b in sdpa if name.startswith("gptstack") else []:
            ratios["vs_" + b.removeprefix("sdpa ")] = ratio_entry(cmp, b, name)
        metrics = {"flops": flops, "flops_per_s": flops / ms[name].stats["median"]}
        rows.append(
            make_row(
                section=section,
                group=group,
                name=name,
                params=params,
                measurement=ms[name],
                metrics=metrics,
                ratios=ratios,
                check=checks.get(name),
            )
        )
    return rows


def step_rows(shape, timing, settings, device, gen):
    """The preset's GPT, forward + backward of the loss, attention sdpa vs gptstack."""
    B, T, V = shape.batch_size, shape.block_size, shape.vocab_size
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    models = {a: shape.build(device, attention=a).train() for a in ("sdpa", "gptstack")}
    inputs = [
        tuple(torch.randint(0, V, (B, T), generator=gen).to(device) for _ in range(2))
        for _ in range(INPUT_SETS)
    ]

    def train_step(model):
        params = list(model.parameters())

        def run(x):
            with amp:
                loss = model(x[0], x[1])[1]
            return torch.autograd.grad(loss, params)

        return run

    checks = {}
    with torch.no_grad(), amp:  # eval mode: no dropout, so both compute the same loss
        losses = {a: m.eval()(*inputs[0])[1].float().item() for a, m in models.items()}
    for a, m in models.items():
        m.train()
        err = abs(losses[a] - losses["sdpa"]) / abs(losses["sdpa"])
        checks[a] = {
            "rel_err": err,
            "tol": CHECK_TOL,
            "ok": err < CHECK_TOL,
            "against": "sdpa backend's eval loss",
        }
    vs = [Variant(a, train_step(m), inputs, timing=timing) for a, m in models.items()]
    cmp = compare(vs, settings, device=device)
    kind = "graph" if timing == "cuda_graph" else "eager"
    group = f"{shape.name} step p={shape.dropout} {kind} B={B} T={T}"
    params = {
        "model": shape.name,
        "batch": B,
        "seq_len": T,
        "dtype": "bf16 autocast",
        "dropout_p": shape.dropout,
        "pass": "model forward+backward",
        "timing": kind,
    }
    not_run = {n: ("error", why) for n, why in cmp.failures.items()}
    rows = emit(
        "steps",
        group,
        params,
        list(models),
        cmp,
        checks,
        not_run,
        flops=B * T * models["sdpa"].flops_per_token(T),
    )
    for r in rows:  # the ratio that matters here: against the sdpa model
        r["ratios"] = (
            {"vs_sdpa": ratio_entry(cmp, "sdpa", r["name"])}
            if (r["name"] == "gptstack" and r["status"] == "ok")
            else {}
        )
    return rows


TABLES = [
    (
        "Attention kernels: gptstack vs each SDPA backend (bf16)",
        "kernels",
        (
            "q, k, v as views of (B, T, 3C), y back to (B, T, C); fwd+bwd: gradients to the "
            "(B, T, 3C) buffer. FLOPs: 2·B·nh·T²·hs forward (causal half), 2.5× that backward."
        ),
    ),
    (
        "Training step with each attention backend",
        "steps",
        (
            "The preset's GPT in training mode (its dropout), bf16 autocast, loss forward + "
            "backward; same weights. FLOPs = B·T·flops_per_token(T)."
        ),
    ),
]
COLUMNS = [
    Column("row", "group"),
    Column("implementation", "name"),
    Column("time ms (median, min–max)", "time_s", "time_ms"),
    Column("TFLOP/s", "metrics.flops_per_s", "tflops"),
    Column("× vs best SDPA", "ratios.vs_best_sdpa", "ratio"),
    Column("× vs sdpa model", "ratios.vs_sdpa", "ratio"),
    Column("check (rel. err)", "check", "check"),
    Column("note", "note"),
]


def save(rows, device, args, settings) -> str:
    columns = [dataclasses.asdict(c) for c in COLUMNS]
    tables = [{"title": t, "section": s, "about": a, "columns": columns} for t, s, a in TABLES]
    note = (
        f"sections kernels and steps by packages/cuda_ops/scripts/attention_bench.py: "
        f"{' '.join(sys.argv)}"
    )
    targets = sorted(glob.glob(args.merge_into), key=os.path.getmtime) if args.merge_into else []
    if targets:
        data = load_result(targets[-1])
        data["rows"] += rows
        data["tables"] += tables
        data["notes"].append(note)
        problems = validate_result(data)
        if problems:
            raise SystemExit(f"attention_bench: merged result fails its schema: {problems[0]}")
        write_json_atomic(targets[-1], data)
        return targets[-1]
    result = Result(
        "attention",
        params={"presets": list(args.presets), "smoke": args.smoke},
        settings=settings.to_dict(),
        env=environment(device, ["python", *sys.argv]),
        path=result_path(args.out, "attention", device, tag="kernels"),
    )
    result.data["rows"] = rows
    result.data["tables"] = tables
    result.note(note)
    result.finish()
    return str(result.path)


def _speedup(ok_rows, name) -> str:
    """The row's ratio against the best SDPA backend (kernels) or the sdpa model (steps)."""
    rat = ok_rows[name]["ratios"] if name in ok_rows else {}
    r = rat.get("vs_best_sdpa") or rat.get("vs_sdpa")
    return f"{r['median']:5.2f}" if r else f"{'-':>5s}"


def summary(rows) -> str:
    """Per row group: best SDPA, gptstack default and best variant, ratios vs best SDPA."""
    head = f"{'row':58s} {'best sdpa':15s} {'ms':>8s} {'gptstack ms':>11s} {'x':>5s}  "
    lines = [head + f"{'best variant':19s} {'x':>5s}"]
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    for group, rs in groups.items():
        ok = {r["name"]: r for r in rs if r["status"] == "ok"}
        ms = {n: r["time_s"]["median"] * 1e3 for n, r in ok.items()}
        sdpa = [n for n in ms if n.startswith("sdpa")]
        ours = [n for n in ms if n.startswith("gptstack")]
        best = min(sdpa, key=ms.get) if sdpa else "-"
        var = min(ours, key=ms.get) if ours else "-"
        lines.append(
            f"{group:58s} {best:15s} {ms.get(best, float('nan')):8.3f} "
            f"{ms.get('gptstack', float('nan')):11.3f} {_speedup(ok, 'gptstack')}  {var:19s} "
            f"{_speedup(ok, var)}"
        )
    skipped = sorted({(r["name"], r["note"][:300]) for r in rows if r["status"] != "ok"})
    lines += [f"  not timed: {n}: {why}" for n, why in skipped]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--merge-into", default=None, help="glob of an attention suite result")
    ap.add_argument("--preset", dest="presets", action="append", choices=PRESETS)
    ap.add_argument("--budget-s", type=float, default=1.0, help="timed seconds per row")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-steps", action="store_true", help="kernels only, no model steps")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, 3 rounds: checks the script")
    args = ap.parse_args(argv)
    args.presets = args.presets or list(PRESETS)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("attention_bench: no CUDA device visible", file=sys.stderr)
        return 2
    settings = Settings.smoke() if args.smoke else Settings(budget_s=args.budget_s)
    timings = ["cuda_events", "cuda_graph"] if device.type == "cuda" else ["cpu"]
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name in args.presets:
        shape = preset_shape(name)
        small = shape.replace(batch_size=2, block_size=min(shape.block_size, 80))
        kshape = small if args.smoke else shape
        for p in sorted({0.0, shape.dropout}):
            for backward in (False, True):
                for timing in timings:
                    print(
                        f"[attention_bench] {name} p={p} {'fwd+bwd' if backward else 'fwd'} "
                        f"{timing}",
                        file=sys.stderr,
                        flush=True,
                    )
                    rows += kernel_rows(kshape, p, backward, timing, settings, device, gen)
        for timing in [] if args.no_steps else timings:
            print(f"[attention_bench] {name} model step {timing}", file=sys.stderr, flush=True)
            rows += step_rows(shape.smoke() if args.smoke else shape, timing, settings, device, gen)
    path = save(rows, device, args, settings)
    print(summary(rows))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
