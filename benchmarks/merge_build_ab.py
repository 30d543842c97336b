"""Merge benchmarks/gpu_build_ab.sh's rounds into one sample-speed JSON per checkpoint.

    python3 benchmarks/merge_build_ab.py AB_DIR --a NAME_A --b NAME_B --out OUT_PREFIX

AB_DIR holds {A,B}-speed-ROUND/sample-speed-RUN.json and {A,B}-profile-ROUND/profile-decode-RUN.json
(one process per build and round, alternated on one GPU). Writes OUT_PREFIX-RUN.json: kind
"sample-speed" with one configuration per build ("graph bf16 fused @NAME"), its tokens/s of
every round and their median, and the cached and slide step times of profile_decode.py per
round; the environment is build A's first round's, its `git` the commit given as --a (the
device's checkout reports whatever commit its copy of the repository holds, not the build's),
and `builds` names both.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ab_dir", type=Path)
    ap.add_argument("--a", required=True, help="what build A is (a commit)")
    ap.add_argument("--b", required=True, help="what build B is (a commit)")
    ap.add_argument("--out", required=True, help="output path prefix; -RUN.json is appended")
    args = ap.parse_args()
    runs = sorted({p.name for p in args.ab_dir.glob("A-speed-*/sample-speed-*.json")})
    for name in runs:
        run = name.removeprefix("sample-speed-").removesuffix(".json")
        merged: dict = {}
        for build, label in (("A", args.a), ("B", args.b)):
            rows = {"tokens_per_s": [], "decode_step_us": [], "slide_step_us": []}
            config = None
            for speed in sorted(args.ab_dir.glob(f"{build}-speed-*/{name}")):
                result = json.loads(speed.read_text())
                merged.setdefault("header", result)
                ((config, row),) = result["configs"].items()
                rows["tokens_per_s"] += row["tokens_per_s"]
                profile = speed.parent.parent / speed.parent.name.replace("speed", "profile")
                steps = json.loads((profile / f"profile-decode-{run}.json").read_text())
                rows["decode_step_us"].append(steps["configs"]["gptstack"]["decode_step_us"])
                rows["slide_step_us"].append(steps["configs"]["gptstack"]["slide_step_us"])
            rows["tokens_per_s_median"] = statistics.median(rows["tokens_per_s"])
            merged.setdefault("configs", {})[f"{config} @{label}"] = rows
        header = merged.pop("header")
        out = {
            "kind": "sample-speed",
            "run": header["run"],
            "tokens": header["tokens"],
            "device": header["device"],
            "torch": header["torch"],
            "date": header["date"],
            "method": "benchmarks/gpu_build_ab.sh: the two builds in alternating processes, "
            "one round of sample_speed.py and profile_decode.py each per build and round",
            "environment": {
                **header["environment"],
                "git": {"commit": args.a, "source": "merge_build_ab.py --a (build A)"},
            },
            "builds": {"A": args.a, "B": args.b},
            "configs": merged["configs"],
        }
        path = Path(f"{args.out}-{run}.json")
        path.write_text(json.dumps(out, indent=1) + "\n")
        medians = {k: round(v["tokens_per_s_median"]) for k, v in out["configs"].items()}
        print(path, medians)


if __name__ == "__main__":
    main()
