"""`gptstack train` end to end, two versions of the code or two settings side by side (A B A B).

    python3 benchmarks/train_ab.py --before REV --preset esp32 [--set KEY=VALUE ...] \\
        [--rounds 2] --out benchmarks/results/train-ab-esp32-cpu-DATE.json
    python3 benchmarks/train_ab.py --after-set model.ops=gptstack:loss \\
        [--after-env TORCHINDUCTOR_ENABLE_PDL=1] --preset gpt2-124m [--set ...] --out FILE.json

With --before, "before" is a git revision, checked out into a temporary worktree whose Python
sources come first on PYTHONPATH (the compiled gptstack.cuda_ops stays the installed one: a
change to it is not what this compares); "after" is this checkout as installed. With
--after-set / --after-env both sides are this checkout (no git needed: it runs on a machine
that has only a copy of the tree), and the after side adds those overrides and environment
variables to its command. Each run is a fresh process
of the CLI, timed from outside (wall, and its minor page faults from getrusage), and its
summary.json (the training-run record: loop wall, tokens/s, val loss, environment) is kept
whole. The JSON has every run, the medians of each side and the medians of the per-round
ratios (after / before for tokens/s, before / after for times: > 1 is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def member_sources(tree: Path) -> str:
    """PYTHONPATH of the workspace members' sources in `tree`, as the GPU scripts build it
    (packages/cuda_ops/scripts/gpu_check.sh): every member but cuda_ops, whose _C is built."""
    sources = [p for p in sorted(tree.glob("packages/*/src")) if p.parent.name != "cuda_ops"]
    return os.pathsep.join(str(p) for p in [*sources, tree / "tools" / "src"])


def git(*args: str) -> str:
    return subprocess.check_output(["git", *args], cwd=ROOT, text=True).strip()


def pairs_of(items: list[str], flag: str) -> dict[str, str]:
    """NAME=VALUE strings as a dict; SystemExit naming the flag for one without '='."""
    bad = [item for item in items if "=" not in item]
    if bad:
        raise SystemExit(f"{flag} {bad[0]!r}: write NAME=VALUE")
    return dict(item.split("=", 1) for item in items)


def run_once(
    side: str, sources: str | None, settings: list[str], extra_env: dict, args, run_dir: Path
) -> dict:
    env = {**os.environ, **extra_env}
    if sources is not None:
        env["PYTHONPATH"] = os.pathsep.join([sources, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    overrides = [x for kv in settings for x in ("--set", kv)]
    cmd = [sys.executable, "-m", "gptstack.tools.cli", "train", "--preset", args.preset,
           *overrides, "--no-progress", "--out", str(run_dir)]  # fmt: skip
    faults0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults0
    if proc.returncode != 0:
        raise SystemExit(f"{side}: {' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr}")
    summary = json.loads((run_dir / "summary.json").read_text())
    header = next((line for line in proc.stdout.splitlines() if line.startswith("run ")), "")
    row = {
        "side": side,
        "process_wall_s": wall,
        "minor_page_faults": faults,
        "loop_wall_s": summary["wall_time_s"],
        "tokens_per_s_median": summary["tokens_per_s_median"],
        "best_val_loss": summary["best_val_loss"],
        "header": header,
        "summary": summary,
    }
    print(
        f"{side:6s} process {wall:6.1f} s, loop {row['loop_wall_s']:6.1f} s, "
        f"{row['tokens_per_s_median']:9,.0f} tokens/s, {faults:9,d} page faults, "
        f"best val {row['best_val_loss']:.4f}",
        flush=True,
    )
    return row


def run_rounds(args, tmp: Path, before_sources: str | None) -> list[dict]:
    """rounds x (before, after), in that order: the before side with args.set (and, with
    before_sources, the older code first on PYTHONPATH), the after side adding --after-set and
    --after-env."""
    after_env = pairs_of(args.after_env, "--after-env")
    sides = (
        ("before", before_sources, args.set, {}),
        ("after", None, [*args.set, *args.after_set], after_env),
    )
    return [
        run_once(side, src, settings, env, args, tmp / f"{side}-{r}")
        for r in range(args.rounds)
        for side, src, settings, env in sides
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="git revision of the baseline (two versions of the code)")
    ap.add_argument(
        "--after-set", action="append", default=[], metavar="KEY=VALUE",
        help="an override only the after side gets (two settings of this checkout)",
    )  # fmt: skip
    ap.add_argument(
        "--after-env", action="append", default=[], metavar="NAME=VALUE",
        help="an environment variable only the after side gets",
    )  # fmt: skip
    ap.add_argument("--preset", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if bool(args.before) == bool(args.after_set or args.after_env):
        ap.error(
            "give --before REV (two versions of the code) or --after-set / --after-env (two "
            "settings of this checkout), not both"
        )
    pairs_of(args.after_set, "--after-set")  # before any run: a typo fails at once
    with tempfile.TemporaryDirectory(prefix="train-ab-") as tmp:
        if not args.before:
            from gptstack.bench.environment import git_state  # also where git is absent

            state = git_state()
            before_commit = after_commit = state["commit"]
            dirty = state["dirty"]
            runs = run_rounds(args, Path(tmp), None)
        else:
            before_commit = git("rev-parse", args.before)
            after_commit = git("rev-parse", "HEAD")
            dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
            tree = Path(tmp) / "before"
            git("worktree", "add", "--detach", str(tree), before_commit)
            try:
                runs = run_rounds(args, Path(tmp), member_sources(tree))
            finally:
                git("worktree", "remove", "--force", str(tree))
    import torch

    from gptstack.bench.environment import environment  # this process: the after side's code

    keys = ("process_wall_s", "loop_wall_s", "tokens_per_s_median", "minor_page_faults")
    medians = {
        side: {k: statistics.median(r[k] for r in runs if r["side"] == side) for k in keys}
        for side in ("before", "after")
    }
    pairs = list(zip(runs[0::2], runs[1::2], strict=True))
    ratios = {
        "tokens_per_s": statistics.median(a["tokens_per_s_median"] / b["tokens_per_s_median"]
                                          for b, a in pairs),
        "loop_wall": statistics.median(b["loop_wall_s"] / a["loop_wall_s"] for b, a in pairs),
        "process_wall": statistics.median(b["process_wall_s"] / a["process_wall_s"]
                                          for b, a in pairs),
    }  # fmt: skip
    record = {
        "kind": "train-ab",
        "preset": args.preset,
        "overrides": args.set,
        "after_overrides": args.after_set,
        "after_env": args.after_env,
        "before": before_commit,
        "after": after_commit,
        "after_dirty": dirty,
        "rounds": args.rounds,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "medians": medians,
        "ratios_after_vs_before": ratios,
        "runs": runs,
        # each run's own environment is in its summary; this one names the machine and versions
        "environment": environment(
            torch.device("cuda" if torch.cuda.is_available() else "cpu"), command=sys.argv
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for side, m in medians.items():
        print(
            f"{side:6s} median: process {m['process_wall_s']:.1f} s, loop {m['loop_wall_s']:.1f}"
            f" s, {m['tokens_per_s_median']:,.0f} tokens/s"
        )
    print("after vs before: " + ", ".join(f"{k} {v:.3f}x" for k, v in ratios.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
