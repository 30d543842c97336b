"""`gptstack train` end to end, two versions of the code or two settings side by side (A B A B).

    python3 benchmarks/train_ab.py --before REV --preset esp32 [--set KEY=VALUE ...] \\
        [--rounds 2] --out benchmarks/results/train-ab-esp32-cpu-DATE.json
    python3 benchmarks/train_ab.py --after-set model.ops=gptstack:loss \\
        [--after-env TORCHINDUCTOR_ENABLE_PDL=1] --preset gpt2-124m [--set ...] --out FILE.json

    python3 benchmarks/train_ab.py --variant default --variant "fp8-head model.fp8=head" \
        --variant "pdl TORCHINDUCTOR_ENABLE_PDL=1" --preset gpt2-124m [--budget-s 400] --out F.json

With --variant (repeated), any number of settings of this checkout run in turn each round: a
variant is its name, then KEY=VALUE items, separated by spaces: a key with a dot
(`model.fp8`) is a `--set` override, one without (`TORCHINDUCTOR_ENABLE_PDL`) an environment
variable; the ratios are each variant's against the first, round by round (how the FP8 and
native-loss variants of 2026-12-07 were measured). --budget-s stops starting runs once the
budget is spent (a GPU call has a hard limit) and still writes what ran; a run that fails is
recorded with its error and the others go on (the exit status says so).
With --before, "before" is a git revision, checked out into a temporary worktree whose Python
sources come first on PYTHONPATH (the compiled gptstack.cuda_ops stays the installed one: a
change to it is not what this compares); "after" is this checkout as installed. With
--after-set / --after-env both sides are this checkout (no git needed: it runs on a machine
that has only a copy of the tree), and the after side adds those overrides and environment
variables to its command. Each run is a fresh process
of the CLI, timed from outside (wall, its minor page faults from getrusage, and on a GPU the
median SM clock, power and clock-lowering reasons nvidia-smi sampled while it ran), and its
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

from gptstack.bench.telemetry import GpuTelemetry

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


def telemetry_text(t: dict | None) -> str:
    """A run's GPU telemetry as the end of its line: ", SM 1,755 MHz (min 1,410), 690 W, ..."."""
    if not t or "sm_clock_mhz" not in t:
        return ""
    clock = t["sm_clock_mhz"]
    text = f", SM {clock['median']:,.0f} MHz (min {clock['min']:,.0f})"
    if "power_w" in t:
        text += f", {t['power_w']['median']:.0f} W"
    for name, share in t.get("clock_reasons_share", {}).items():
        text += f", {name} {100 * share:.0f} %"
    return text


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
    with GpuTelemetry() as gpu:  # the SM clock and power while it ran (None on a CPU)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults0
    if proc.returncode != 0:
        error = f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
        print(f"{side}: {error}", flush=True)
        return {"side": side, "process_wall_s": wall, "error": error}
    summary = json.loads((run_dir / "summary.json").read_text())
    header = next((line for line in proc.stdout.splitlines() if line.startswith("run ")), "")
    row = {
        "side": side,
        "process_wall_s": wall,
        "minor_page_faults": faults,
        "loop_wall_s": summary["wall_time_s"],
        "tokens_per_s_median": summary["tokens_per_s_median"],
        "best_val_loss": summary["best_val_loss"],
        "peak_memory_bytes": summary.get("peak_memory_bytes"),
        "gpu_telemetry": gpu.summary(),
        "header": header,
        "summary": summary,
    }
    print(
        f"{side:6s} process {wall:6.1f} s, loop {row['loop_wall_s']:6.1f} s, "
        f"{row['tokens_per_s_median']:9,.0f} tokens/s, {faults:9,d} page faults, "
        f"best val {row['best_val_loss']:.4f}{telemetry_text(row['gpu_telemetry'])}",
        flush=True,
    )
    return row


def parse_variant(text: str) -> tuple[str, list[str], dict[str, str]]:
    """'NAME KEY=VALUE ...' -> (name, --set overrides, environment); SystemExit on a bad one."""
    name, *items = text.split()
    pairs = pairs_of(items, f"--variant {name!r}:")
    settings = [f"{k}={v}" for k, v in pairs.items() if "." in k]
    return name, settings, {k: v for k, v in pairs.items() if "." not in k}


def sides_of(args, before_sources: str | None) -> list[tuple]:
    """(name, sources, settings, environment) of each side, in the order a round runs them:
    before then after (the before side with the older code first on PYTHONPATH when
    before_sources is given), or the --variant list."""
    if args.variant:
        variants = [parse_variant(v) for v in args.variant]
        return [(name, None, [*args.set, *sets], env) for name, sets, env in variants]
    after_env = pairs_of(args.after_env, "--after-env")
    return [
        ("before", before_sources, args.set, {}),
        ("after", None, [*args.set, *args.after_set], after_env),
    ]


def run_rounds(args, tmp: Path, before_sources: str | None) -> list[dict]:
    """rounds x sides (sides_of), alternated; no new run once args.budget_s is spent."""
    start, runs = time.perf_counter(), []
    for r in range(args.rounds):
        for side, src, settings, env in sides_of(args, before_sources):
            if args.budget_s and time.perf_counter() - start > args.budget_s:
                print(f"budget of {args.budget_s:.0f} s spent: round {r + 1}, {side} not run")
                return runs
            runs.append(run_once(side, src, settings, env, args, tmp / f"{side}-{r}"))
            runs[-1]["round"] = r + 1
    return runs


# ratio name -> (summary key, True where more is faster): each ratio is > 1 for faster
RATIOS = {
    "tokens_per_s": ("tokens_per_s_median", True),
    "loop_wall": ("loop_wall_s", False),
    "process_wall": ("process_wall_s", False),
}


def ratios_to_first(runs: list[dict], names: list[str]) -> dict[str, dict]:
    """Each later side's ratios (RATIOS) to the first side's, round by round, and their
    medians: {name: {ratio: {"per_round": [...], "median": x}}}. Failed runs are left out."""
    by_round: dict[int, dict[str, dict]] = {}
    for run in runs:
        if "error" not in run:
            by_round.setdefault(run["round"], {})[run["side"]] = run
    rounds = [rs for rs in by_round.values() if names[0] in rs]
    ratios: dict[str, dict] = {}
    for name in names[1:]:
        ratios[name] = {}
        for ratio, (key, more_is_faster) in RATIOS.items():
            per_round = [
                rs[name][key] / rs[names[0]][key] if more_is_faster
                else rs[names[0]][key] / rs[name][key]
                for rs in rounds if name in rs
            ]  # fmt: skip
            median = statistics.median(per_round) if per_round else None
            ratios[name][ratio] = {"per_round": per_round, "median": median}
    return ratios


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
    ap.add_argument(
        "--variant", action="append", default=[], metavar="'NAME KEY=VALUE ...'",
        help="a setting of this checkout (repeat: every variant each round; ratios to the first)",
    )  # fmt: skip
    ap.add_argument("--budget-s", type=float, default=0, help="start no run after this (0: none)")
    ap.add_argument("--preset", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    modes = [bool(args.before), bool(args.after_set or args.after_env), bool(args.variant)]
    if sum(modes) != 1:
        ap.error(
            "give one of --before REV (two versions of the code), --after-set / --after-env "
            "(two settings of this checkout) or --variant ... (several settings)"
        )
    if args.variant and len(args.variant) < 2:
        ap.error("--variant: give two or more (the first is what the others are compared with)")
    pairs_of(args.after_set, "--after-set")  # before any run: a typo fails at once
    names = [parse_variant(v)[0] for v in args.variant]
    if len(set(names)) != len(names):
        ap.error(f"--variant names repeat: {names}")
    from gptstack.tools.config import apply_overrides, load_preset
    from gptstack.tools.errors import GptstackError

    for side, _, settings, _ in sides_of(args, None):  # a bad override fails before any run
        try:
            apply_overrides(load_preset(args.preset), settings)
        except GptstackError as e:
            ap.error(f"{side}: {e}")
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
    side_names = names or ["before", "after"]
    ok = [r for r in runs if "error" not in r]
    medians = {
        side: {k: statistics.median(r[k] for r in ok if r["side"] == side) for k in keys}
        for side in side_names
        if any(r["side"] == side for r in ok)
    }
    for side, m in medians.items():  # the median of the runs' median SM clocks, where sampled
        clocks = [
            r["gpu_telemetry"]["sm_clock_mhz"]["median"]
            for r in ok
            if r["side"] == side and (r.get("gpu_telemetry") or {}).get("sm_clock_mhz")
        ]
        m["sm_clock_mhz"] = statistics.median(clocks) if clocks else None
    ratios = ratios_to_first(runs, side_names)
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
        "variants": args.variant,
        "medians": medians,
        # the after side's medians (--before, --after-set), or every variant's to the first
        "ratios_after_vs_before": (
            {} if names else {k: r["median"] for k, r in ratios.get("after", {}).items()}
        ),
        "ratios_vs_first": ratios if names else {},
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
            + (f", SM {m['sm_clock_mhz']:,.0f} MHz" if m["sm_clock_mhz"] else "")
        )
    for name, r in ratios.items():
        per_round = ", ".join(f"{x:.3f}" for x in r["tokens_per_s"]["per_round"])
        medians_text = ", ".join(
            f"{k} {v['median']:.3f}x" for k, v in r.items() if v["median"] is not None
        )
        print(f"{name} vs {side_names[0]}: {medians_text}; tokens/s by round {per_round}")
    print(f"wrote {args.out}")
    failed = [r["side"] for r in runs if "error" in r]
    if failed:
        raise SystemExit(f"runs failed: {failed} (their errors are in {args.out})")


if __name__ == "__main__":
    main()
