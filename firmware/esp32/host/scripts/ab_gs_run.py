"""Two gs-run builds side by side past the context window: tokens/s and weight bytes per token.

    uv run python firmware/esp32/host/scripts/ab_gs_run.py --before OLD/gs-run --after NEW/gs-run \
        --artifact firmware/esp32/data/model.gsm --tokens 256 --rounds 21 --out result.json

`gptstack bench engine` stays inside the window (its PyTorch side re-prefills instead of sliding),
so it cannot show what the window slide costs; this script can. Each round runs both builds on
the same prompt, seed 1, temperature 0.8 and top-k 40, in alternating order (A B, then B A),
one thread each; a sample is the
generation time gs-run measures itself (gen_s of --json: sampling, decoding and every forward of
the generated tokens, the slides' re-encodes included). It reports the median tokens/s of each
build, the median and range of the per-round ratios after / before (docs/MEASURING.md rules 2
and 3),
and each build's weight bytes per token: gs-run's own count where the build has one, else the
count FORMAT.md section 11 gives for a build that re-encodes one position at a time
(gptstack.quant.budget.tile_read_bytes), marked as computed. The JSON has every sample.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path


def run_once(gs_run: Path, artifact: Path, prompt: str, tokens: int) -> dict:
    cmd = [
        str(gs_run),
        str(artifact),
        "--prompt",
        prompt,
        "--tokens",
        str(tokens),
        "--seed",
        "1",
        "--temperature",
        "0.8",
        "--top-k",
        "40",
        "--json",
        "--quiet",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def per_token_refeed_bytes(artifact: Path, n_prompt: int, tokens: int) -> float:
    """Weight bytes per generated token of an engine that re-feeds a slide's kept ids one
    position at a time (the engine before the batched re-encode), from FORMAT.md section 11."""
    from gptstack.quant import read_artifact
    from gptstack.quant.budget import tile_read_bytes

    spec = read_artifact(artifact).spec
    T, half = spec.block_size, spec.block_size // 2
    pos, total = 0, 0
    for i in range(n_prompt + tokens - 1):  # gs-run feeds every generated token but the last
        read = tile_read_bytes(spec, 1, logits=True)
        if pos == T:
            read += half * tile_read_bytes(spec, 1, logits=False)
        total += read if i >= n_prompt else 0
        pos = half + 1 if pos == T else pos + 1
    return total / tokens


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() + (" (dirty)" if dirty.stdout.strip() else "")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="the baseline gs-run")
    p.add_argument("--after", type=Path, required=True, help="the candidate gs-run")
    p.add_argument("--artifact", type=Path, required=True)
    p.add_argument("--prompt", default="ROMEO:")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", type=Path, help="write the JSON here (temporary name, then renamed)")
    args = p.parse_args()

    builds = {"before": args.before, "after": args.after}
    for _ in range(args.warmup):
        for path in builds.values():
            run_once(path, args.artifact, args.prompt, args.tokens)
    samples: dict[str, list[float]] = {"before": [], "after": []}
    last: dict[str, dict] = {}
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for name in order:
            out = run_once(builds[name], args.artifact, args.prompt, args.tokens)
            samples[name].append(out["gen_s"])
            last[name] = out
    if last["before"]["tokens"] != last["after"]["tokens"]:
        print(
            "the two builds generated different tokens: not the same engine arithmetic",
            file=sys.stderr,
        )
        return 1
    ratios = [b / a for b, a in zip(samples["before"], samples["after"])]  # > 1: after faster
    n_prompt = len(last["after"]["prompt_ids"])
    weight = {}
    for name, out in last.items():
        if "weight_bytes_per_token" in out:
            weight[name] = {"bytes": out["weight_bytes_per_token"], "source": "gs-run --stats"}
        else:
            weight[name] = {
                "bytes": round(per_token_refeed_bytes(args.artifact, n_prompt, args.tokens)),
                "source": "computed: one position per re-fed id (FORMAT.md 11)",
            }
    result = {
        "kind": "engine-ab-past-the-window",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "cpu": cpu_name(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "params": {
            "artifact": str(args.artifact),
            "prompt": args.prompt,
            "tokens": args.tokens,
            "prompt_ids": n_prompt,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "threads": 1,
            "before": str(args.before),
            "after": str(args.after),
        },
        "gen_s": samples,
        "tokens_per_s_median": {k: args.tokens / statistics.median(v) for k, v in samples.items()},
        "speedup_median": statistics.median(ratios),
        "speedup_min": min(ratios),
        "speedup_max": max(ratios),
        "weight_bytes_per_token": weight,
    }
    if args.out is not None:
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, args.out)
    print(f"{'build':<8} {'tokens/s (median)':>18} {'weight bytes/token':>20}  source")
    for name in ("before", "after"):
        w = weight[name]
        print(
            f"{name:<8} {result['tokens_per_s_median'][name]:>18.1f} {w['bytes']:>20,}  "
            f"{w['source']}"
        )
    print(
        f"after / before speed: {result['speedup_median']:.3f}x median of {args.rounds} "
        f"rounds [{result['speedup_min']:.3f}-{result['speedup_max']:.3f}]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
