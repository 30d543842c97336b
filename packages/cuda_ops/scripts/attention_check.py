"""Every CUDA attention kernel under compute-sanitizer: memcheck, racecheck, synccheck, initcheck.

    python packages/cuda_ops/scripts/attention_check.py            # on the GPU host (1: not clean)
    python packages/cuda_ops/scripts/attention_check.py --workload # what runs under each tool

The workload calls every kernel instance family once on small awkward shapes (T = 1 and T = 77:
not a multiple of any tile; hs 32, 64, 128): the bf16 forward with 4 and 8 warps per CTA, the
bf16 backward in both modes (two-stage and atomic dQ, whose memset and conversion kernels come
with it) with 4 and 8 warps, all with and without dropout, and the float32 forward and backward.
Each result is compared with the CPU kernel on the same inputs and seed (bf16: relative error
< 1e-2; float32: < 1e-5), so a run under a tool also shows the outputs were written. memcheck
and initcheck run with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that every tensor is its own
allocation and an out-of-bounds access cannot land in a neighbour from the caching allocator.
A call that raises (a launch the device refuses) is reported and the workload goes on. The driver
prints one line per tool ("clean" or the sanitizer's error summary), and for a tool that is not
clean the first errors: the workload's own error lines (which call, which exception) and the
sanitizer's first reports without their stack frames. It exits 1 unless every tool is clean; a
missing compute-sanitizer is an error too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
TOOL_TIMEOUT_S = 120  # per tool: all four fit gpu_check.sh's sanitize stage (540 s)
SHAPES = [(1, 2, 1, 32), (2, 3, 77, 32), (2, 3, 77, 64), (1, 2, 77, 128)]


def workload() -> int:
    import torch

    from gptstack.cuda_ops import causal_attention
    from gptstack.cuda_ops.attention import cuda_variant
    from gptstack.cuda_ops.testing import rel_error

    if not torch.cuda.is_available():
        print("attention_check: no CUDA device visible", file=sys.stderr)
        return 2
    gen = torch.Generator().manual_seed(0)
    worst, errors = {}, {}
    for shape in SHAPES:
        for dtype in (torch.bfloat16, torch.float32):
            q, k, v, dy = (torch.randn(shape, generator=gen).to(dtype) for _ in range(4))
            for p in (0.0, 0.2):
                seed = torch.tensor([12345], dtype=torch.int64)
                ref = _fwd_bwd(
                    causal_attention, q.float(), k.float(), v.float(), dy.float(), p, seed
                )
                variants = (
                    [(w, m) for w in (4, 8) for m in ("stages", "atomic")]
                    if dtype == torch.bfloat16
                    else [(0, "auto")]
                )
                for warps, mode in variants:
                    key = (shape, dtype, p, warps, mode)
                    try:
                        with cuda_variant(warps, warps, mode):
                            got = _fwd_bwd(
                                causal_attention,
                                q.cuda(),
                                k.cuda(),
                                v.cuda(),
                                dy.cuda(),
                                p,
                                seed.cuda(),
                            )
                        torch.cuda.synchronize()
                    except Exception as e:  # a refused launch: report it, check the others
                        errors[key] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
                        continue
                    worst[key] = max(rel_error(a, b) for a, b in zip(got, ref))
    tol = {torch.bfloat16: 1e-2, torch.float32: 1e-5}  # docs/MEASURING.md rule 5
    bad = {k: e for k, e in worst.items() if not e < tol[k[1]]}
    worst_err = f"{max(worst.values()):.2e}" if worst else "-"
    print(
        f"attention_check workload: {len(worst)} calls, worst relative error {worst_err}; "
        f"{len(bad)} off, {len(errors)} raised"
    )
    for (shape, dtype, p, warps, mode), e in bad.items():
        print(f"  off: {shape} {dtype} p={p} warps={warps} {mode}: {e:.2e}")
    for (shape, dtype, p, warps, mode), e in errors.items():
        print(f"  error: {shape} {dtype} p={p} warps={warps} {mode}: {e}")
    return 1 if bad or errors else 0


def _fwd_bwd(attend, q, k, v, dy, p, seed):
    import torch

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    y = attend(q, k, v, dropout_p=p, seed=seed if p else None)
    return (y, *torch.autograd.grad(y, (q, k, v), dy))


def sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if not found and home and (Path(home) / "bin" / "compute-sanitizer").exists():
            found = str(Path(home) / "bin" / "compute-sanitizer")
    return found


def drive(tools) -> int:
    exe = sanitizer()
    if exe is None:
        print(
            "attention_check: compute-sanitizer not found (PATH, $CUDA_HOME/bin, "
            "/usr/local/cuda/bin)"
        )
        return 1
    ok = True
    for tool in tools:
        env = dict(os.environ)
        if tool in ("memcheck", "initcheck"):
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        cmd = [
            exe,
            "--tool",
            tool,
            "--error-exitcode",
            "1",
            sys.executable,
            str(Path(__file__).resolve()),
            "--workload",
        ]
        try:
            run = subprocess.run(
                cmd, check=False, capture_output=True, text=True, env=env, timeout=TOOL_TIMEOUT_S
            )
            out, rc = run.stdout + run.stderr, run.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = f"timed out after {TOOL_TIMEOUT_S} s: {e.stdout or ''}", -1
        summary = [ln for ln in out.splitlines() if "ERROR SUMMARY" in ln or "workload" in ln]
        verdict = "clean" if rc == 0 else f"FAILED (exit {rc})"
        # one line per tool, with the sanitizer's ERROR SUMMARY (what gpu_check.sh collects)
        print(f"attention_check {tool}: {verdict} ({'; '.join(s.strip() for s in summary)})")
        if rc != 0:
            ok = False
            print("\n".join("    " + ln for ln in first_errors(out)))
    return 0 if ok else 1


def first_errors(out: str, n: int = 12) -> list[str]:
    """What went wrong, first: the workload's own error lines (which call raised what), then
    the sanitizer's first reports without their stack frames (the frames follow each report and
    would fill the lines); the output's tail when neither is there (a crash)."""
    lines = out.splitlines()
    ours = [ln for ln in lines if ln.lstrip().startswith(("error:", "off:")) or "Error:" in ln]
    frames = ("Host Frame", "Device Frame", "Saved host backtrace", "=========     ")
    reports = [
        ln
        for ln in lines
        if ln.startswith("=========") and not any(f in ln for f in frames) and ln.strip("= ")
    ]
    picked = (ours[:n] + reports[:n])[: 2 * n]
    return picked or lines[-n:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", action="store_true", help="run the kernels (no sanitizer)")
    ap.add_argument("--tools", nargs="*", default=list(TOOLS), choices=list(TOOLS))
    args = ap.parse_args(argv)
    return workload() if args.workload else drive(args.tools)


if __name__ == "__main__":
    sys.exit(main())
