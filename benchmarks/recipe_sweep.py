"""Training-recipe sweep: many short `gptstack train` runs of one preset, side by side.

    python3 benchmarks/recipe_sweep.py run --grid esp32 --out DIR [--jobs 4] [--deadline-s 540]
                                           [--eval]
    python3 benchmarks/recipe_sweep.py report benchmarks/results/sweep-esp32-h200-DATE.json

`run` trains every point of a named grid (GRIDS below: the preset, the swept settings, the seeds)
with `python3 -m gptstack.tools.cli train --set ...`, exactly the user's command, `--jobs` runs at
a time on the one GPU (small models leave it mostly idle, so runs overlap well), and writes one
JSON: each run's overrides, best val loss and bits/char, the step of the best evaluation, the
whole val curve and the wall time, plus the environment (docs/MEASURING.md rule 6). A run still
going at the deadline is stopped with SIGINT (it saves) and recorded as interrupted. `--eval`
then scores each run's best/ with `gptstack eval --val-windows all` (every val window: the figure
the presets' goals are stated in; a training evaluation averages random windows).

A grid's point may carry a "name" (not a setting): its run folder is then NAME,seed=N, which a
later grid can name, e.g. a teacher for train.distill_from: esp32-teacher runs with --runs
sweep-teachers, then esp32-distill's points name sweep-teachers/NAME,seed=1337 (relative to the
working directory, the checkout's root on the GPU machine).

`report` turns that JSON into a markdown table (best first; repeated seeds as mean and spread)
and a plot of best val bits/char against each swept setting, beside the JSON in benchmarks/.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gptstack.tokenizer import write_atomic

# The esp32 preset's recipe after rounds 1-2, every key spelled out so round 3's table shows
# each setting it varies.
ESP32_WINNER = {
    "train.max_steps": 3000,
    "train.lr": 2e-3,
    "train.min_lr": 1e-4,
    "train.weight_decay": 1.0,
    "train.batch_size": 64,
    "train.beta2": 0.99,
    "model.dropout": 0.2,
}

# Since round 6 the esp32 preset learns from a teacher (preset esp32-teacher); the grids from
# before, the teachers themselves and the comparisons without one set this to train alone.
NO_TEACHER = {"train.distill_from": ""}
# gpt2-124m's 300-step comparisons of 2026-12-07 (benchmarks/gpu_curves.sh), 200 steps
GPT2_CURVE = {
    "train.batch_size": 16,
    "train.grad_accum": 4,
    "train.cuda_batch_size": 0,
    "train.max_steps": 200,
    "train.warmup_steps": 30,
    "train.eval_interval": 50,
    "train.eval_batches": 8,
}

# Round 6's best teacher, the recipe of preset esp32-teacher: the esp32 model 1.5x wider.
WIDE_TEACHER = {
    "name": "wide",
    "model.n_embd": 384,
    "model.n_head": 6,
    "model.dropout": 0.3,
    "train.lr": 1e-3,
}

# name -> preset, fixed settings (every run), swept axes (the cartesian product), seeds.
# The evaluation interval is fixed across a grid, so "best step" means the same everywhere.
GRIDS: dict[str, dict] = {
    # esp32: the seed's schedule is 50,000 steps with a cosine over all of them; its best val
    # (2.790 nats/token) comes at step 3,000 and it overfits after. Short schedules that anneal
    # where the model is best, more regularisation, and the peak learning rate.
    "esp32": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, "train.warmup_steps": 200, **NO_TEACHER},
        "axes": {
            "train.max_steps": [2500, 4000, 6000],
            "model.dropout": [0.2, 0.3],
            "train.weight_decay": [0.1, 0.5],
            "train.lr": [1e-3, 2e-3],
        },
        "seeds": [1337],
    },
    # esp32, round 2 (round 1: the shortest schedule, the higher lr and weight decay won; best
    # 2.093 bits/char at 2,500 steps, lr 2e-3, weight decay 0.5, dropout 0.2)
    "esp32-fine": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, "train.warmup_steps": 200, **NO_TEACHER},
        "axes": {
            "train.max_steps": [2000, 2500, 3000],
            "train.lr": [2e-3, 3e-3],
            "train.weight_decay": [0.5, 1.0],
            "model.dropout": [0.15, 0.2],
        },
        "seeds": [1337],
    },
    # shakespeare-char: nanoGPT's recipe (5,000 steps, dropout 0.2, lr 1e-3) reaches ~1.47
    "shakespeare-char": {
        "preset": "shakespeare-char",
        "fixed": {"train.eval_interval": 250},
        "axes": {
            "model.dropout": [0.2, 0.3],
            "train.weight_decay": [0.1, 0.5],
        },
        "seeds": [1337],
    },
    # the finalists of both esp32 rounds, three seeds each (rounds 1-2: best 2.074 and 2.077
    # bits/char at 3,000 steps, each from one seed)
    "esp32-final": {
        "preset": "esp32",
        "fixed": {
            "train.eval_interval": 250,
            "train.warmup_steps": 200,
            "train.max_steps": 3000,
            "model.dropout": 0.2,
            **NO_TEACHER,
        },
        "points": [
            {"train.lr": 2e-3, "train.weight_decay": 1.0},
            {"train.lr": 3e-3, "train.weight_decay": 0.5},
        ],
        "seeds": [1337, 1, 2],
    },
    # shakespeare-char: dropout 0.3 overfits later (best at step 2,750 of 5,000, 1.452); a
    # schedule that anneals there, three seeds each
    "shakespeare-char-final": {
        "preset": "shakespeare-char",
        "fixed": {"train.eval_interval": 250, "train.weight_decay": 0.5},
        "points": [
            {"train.max_steps": 2500, "model.dropout": 0.3},
            {"train.max_steps": 3500, "model.dropout": 0.3},
            {"train.max_steps": 3500, "model.dropout": 0.35},
        ],
        "seeds": [1337, 1, 2],
    },
    # esp32, round 3: one change at a time from the preset (the round-2 winner, 2.074 bits/char
    # with seed 1337), the settings rounds 1-2 left untried: batch size, beta2, min_lr, and
    # stronger weight decay / dropout with a longer schedule
    "esp32-round3": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, "train.warmup_steps": 200, **NO_TEACHER},
        "points": [
            {**ESP32_WINNER},
            {**ESP32_WINNER, "train.weight_decay": 2.0},
            {**ESP32_WINNER, "train.batch_size": 128},
            {**ESP32_WINNER, "train.beta2": 0.95},
            {**ESP32_WINNER, "model.dropout": 0.25, "train.max_steps": 3500},
            {**ESP32_WINNER, "train.lr": 2.5e-3},
            {**ESP32_WINNER, "train.min_lr": 1e-5},
            {**ESP32_WINNER, "train.max_steps": 3500},
        ],
        "seeds": [1337],
    },
    # shakespeare-char, round 3: dropout 0.35 was still improving at the end of 3,500 steps
    # (best at 86-100 % of the schedule, 1.4549 +- 0.0047): longer schedules, more dropout
    "shakespeare-char-round3": {
        "preset": "shakespeare-char",
        "fixed": {"train.eval_interval": 250},
        "points": [
            {"train.max_steps": 4500, "model.dropout": 0.35, "train.weight_decay": 0.5},
            {"train.max_steps": 5000, "model.dropout": 0.4, "train.weight_decay": 0.5},
            {"train.max_steps": 4500, "model.dropout": 0.35, "train.weight_decay": 1.0},
        ],
        "seeds": [1337, 1, 2],
    },
    # esp32, round 4: round 3 found nothing better than the preset, but batch 128 was far worse
    # (2.147 bits/char by `gptstack eval` against 2.082): smaller batches, more steps
    "esp32-round4": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, "train.warmup_steps": 200, **NO_TEACHER},
        "points": [
            {**ESP32_WINNER, "train.batch_size": 32},
            {**ESP32_WINNER, "train.batch_size": 32, "train.max_steps": 4500},
            {**ESP32_WINNER, "train.batch_size": 32, "train.max_steps": 6000},
            {**ESP32_WINNER, "train.batch_size": 32, "train.max_steps": 6000, "train.lr": 1.5e-3},
            {
                **ESP32_WINNER,
                "train.batch_size": 32,
                "train.max_steps": 6000,
                "model.dropout": 0.25,
            },
            {**ESP32_WINNER, "train.batch_size": 48, "train.max_steps": 4000},
        ],
        "seeds": [1337],
    },
    # shakespeare-char: the esp32 model trains better on smaller batches; the same here, with
    # round 3's most promising regularisation (one seed first)
    "shakespeare-char-batch": {
        "preset": "shakespeare-char",
        "fixed": {"train.eval_interval": 250},
        "points": [
            {
                "train.batch_size": 32,
                "train.max_steps": 7000,
                "model.dropout": 0.35,
                "train.weight_decay": 0.5,
            },
        ],
        "seeds": [1337],
    },
    # esp32 with an exponential moving average of the weights (train.ema_decay): rounds 3-4
    # found no setting better than the preset (2.0816 bits/char by `gptstack eval`)
    "esp32-ema": {
        "note": "ema_decay 0.998 and 0.999 ran the same average: within 3,000 steps the decay "
        "follows its ramp (1 + n) / (10 + n), which reaches 0.997 at the last step (the esp32 "
        "runs are bit-reproducible: the two rows agree to the last digit).",
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, "train.warmup_steps": 200, **NO_TEACHER},
        "axes": {"train.ema_decay": [0.995, 0.998, 0.999]},
        "seeds": [1337, 1],
    },
    # shakespeare-char, round 3's best regularisation with the weight average
    "shakespeare-char-ema": {
        "note": "The sweep's deadline stopped these runs before step 4,500 (the table shows "
        "where), after their best steps. Below step 4,490 the decay follows its ramp "
        "(1 + n) / (10 + n) for 0.998 and 0.999 alike, so the six runs are one recipe run twice "
        "per seed: they differ because CUDA training of this model is not bit-reproducible.",
        "preset": "shakespeare-char",
        "fixed": {
            "train.eval_interval": 250,
            "train.max_steps": 4500,
            "model.dropout": 0.35,
            "train.weight_decay": 1.0,
        },
        "axes": {"train.ema_decay": [0.998, 0.999]},
        "seeds": [1337, 1, 2],
    },
    # shakespeare-char: the 4,500-step preset peaked at step 3,500 in all seven of its full
    # runs on 2026-12-03: a schedule that ends there spends no steps after the best one
    "shakespeare-char-steps": {
        "note": "Compare with the preset's own full 4,500-step runs (seven, all val windows "
        "scored in each file: results/run-shakespeare-char-h200-{cold,warm-*,seed*}-20261203.json) "
        "and three more 4,000-step runs of seed 1337 "
        "(results/run-shakespeare-char-h200-4000-*-20261203.json): the preset stays at 4,500.",
        "preset": "shakespeare-char",
        "fixed": {"train.eval_interval": 250},
        "axes": {"train.max_steps": [3500, 4000]},
        "seeds": [1337, 1, 2],
    },
    # esp32: the preset's other two seeds scored over every val window (seed 1337: 2.0816)
    # esp32 on a CPU (the pipeline's schedule: 450 steps, batch 32, no dropout, no teacher), in
    # bf16: PyTorch's ops and SDPA (the model section's), against the preset's cpu_bf16_ops and
    # cpu_bf16_attention (gptstack.cuda_ops' ops, the manual attention), and against both of
    # gptstack.cuda_ops' kernels. Run with --jobs 1 on the CPU it is about.
    "esp32-cpu-kernels": {
        "note": "CPU, bf16 (AVX512-BF16), 2 cores, one run at a time: the wall times compare.",
        "preset": "esp32",
        "fixed": {"train.device": "cpu", "train.dtype": "bf16"},
        "points": [
            {"train.cpu_bf16_ops": "torch", "train.cpu_bf16_attention": "sdpa"},
            {"train.cpu_bf16_ops": "gptstack", "train.cpu_bf16_attention": "manual"},
            {"train.cpu_bf16_ops": "gptstack", "train.cpu_bf16_attention": "gptstack"},
        ],
        "seeds": [1337, 1, 2],
    },
    "esp32-seeds": {
        "note": "The preset's seeds 1 and 2; seed 1337 is the preset's point in esp32-round3.",
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, **NO_TEACHER},
        "axes": {"train.max_steps": [3000]},
        "seeds": [1, 2],
    },
    # esp32, not run yet: the model's shape at about the same parameters (vocabulary 512 and
    # context 64 stay: the chip fixes them). The engine reads n_layer, n_head and the head size
    # from the artifact; 8 x 224 grows the int8 KV cache to 2 * 8 * 64 * 224 = 229,376 bytes,
    # the arena to ~248 KB of the 280 KiB budget (check with `gptstack export`'s memory plan).
    "esp32-shape": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, **NO_TEACHER},
        "points": [
            {"model.n_head": 4},
            {"model.n_layer": 8, "model.n_embd": 224, "model.n_head": 7},
            {"model.n_layer": 4, "model.n_embd": 320, "model.n_head": 10},
        ],
        "seeds": [1337, 1, 2],
        "note": "Same data, vocabulary and context; about the same parameters. Compare with the "
        "preset's shape (6 x 256, 8 heads) on the same seeds: seed 1337 in esp32-round3, seeds 1 "
        "and 2 in esp32-seeds. Four heads of 64 had the lowest mean but a worse seed 1337 than "
        "the preset, within the seeds' spread; deeper-narrower and shallower-wider were worse. "
        "The preset keeps its shape.",
    },
    # round 5: four heads of 64 were the best shape on the mean (2.0931 vs the preset's 2.0975);
    # around it, and the bias-free layers nanoGPT finds a little better
    "esp32-round5": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, **NO_TEACHER},
        "points": [
            {"model.n_head": 4, "model.bias": False},
            {"model.n_head": 8, "model.bias": False},
            {"model.n_head": 4, "model.dropout": 0.25},
            {"model.n_head": 4, "model.dropout": 0.15},
            {"model.n_head": 4, "train.weight_decay": 1.5},
            {"model.n_head": 4, "train.lr": 0.003},
        ],
        "seeds": [1337, 1],
        "note": "Twelve runs at a time. No point reached 2.08 bits/char; the best seed-1337 run is "
        "worse than the preset's own (esp32-round3), so the preset is unchanged.",
    },
    # esp32, round 6: knowledge distillation. Larger models trained on the same tokens (the
    # teachers: this grid, run with --runs sweep-teachers), then the preset's model trained
    # towards their predictions as well as the text (esp32-distill), and the linear decay.
    "esp32-teacher": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, **NO_TEACHER},
        "points": [
            WIDE_TEACHER,
            {
                "name": "wide-d4",
                "model.n_embd": 384,
                "model.n_head": 6,
                "model.dropout": 0.4,
                "train.lr": 1e-3,
            },
            {
                "name": "deep-wide",
                "model.n_layer": 8,
                "model.n_embd": 512,
                "model.n_head": 8,
                "model.dropout": 0.35,
                "train.lr": 8e-4,
            },
        ],
        "seeds": [1337],
        "note": (
            "Larger models on the esp32 preset's data, tokenizer and context: the teachers of "
            "esp32-distill. Alone none beats the esp32 model itself (esp32-round3, seed 1337)."
        ),
    },
    "esp32-distill": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250},
        "axes": {
            "train.distill_from": [
                f"sweep-teachers/{name},seed=1337" for name in ("wide", "wide-d4", "deep-wide")
            ],
            "train.distill_weight": [0.5, 0.8],
        },
        "seeds": [1337, 1],
        "note": (
            "The preset's model trained towards a teacher's predictions as well as the text "
            "(train.distill_from; distill_weight is the teacher's share of the loss). Compare "
            "with the preset alone on the same seeds: seed 1337 in esp32-round3, seed 1 in "
            "esp32-seeds."
        ),
    },
    # round 7: the best teacher of round 6 again (esp32 runs are bit-reproducible), the preset's
    # own model as its teacher, and a hotter wide teacher; students on three seeds
    "esp32-teacher2": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, **NO_TEACHER},
        "points": [
            WIDE_TEACHER,
            {"name": "self"},
            {
                "name": "wide-hot",
                "model.n_embd": 384,
                "model.n_head": 6,
                "model.dropout": 0.25,
                "train.lr": 1.5e-3,
            },
        ],
        "seeds": [1337],
        "note": (
            "'wide' reproduces round 6's teacher to the last digit (esp32 runs are bit-"
            "reproducible); 'self' is the esp32 preset itself."
        ),
    },
    "esp32-distill2": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250},
        "points": [
            {"train.distill_from": "sweep-teachers/wide,seed=1337", "train.distill_weight": 0.5},
            {"train.distill_from": "sweep-teachers/wide,seed=1337", "train.distill_weight": 0.3},
            {"train.distill_from": "sweep-teachers/self,seed=1337", "train.distill_weight": 0.5},
            {
                "train.distill_from": "sweep-teachers/wide-hot,seed=1337",
                "train.distill_weight": 0.5,
            },
        ],
        "seeds": [1337, 1, 2],
        "note": (
            "Three seeds each; the preset alone on the same seeds: esp32-round3 (seed 1337) and "
            "esp32-seeds (1, 2). Teacher 'wide' at weight 0.5 became the preset's recipe "
            "(preset esp32-teacher): each of its seeds is below 2.08 bits/char over every val "
            "window."
        ),
    },
    "esp32-linear": {
        "preset": "esp32",
        "fixed": {"train.eval_interval": 250, **NO_TEACHER},
        "points": [{"train.lr_decay": "linear"}],
        "seeds": [1337, 1, 2],
        "note": (
            "train.lr_decay=linear instead of the preset's cosine, on the preset's seeds (cosine:"
            " esp32-round3, esp32-seeds): worse."
        ),
    },
    # gpt2-124m's numerics that change the curve as well as the speed, over seeds (one seed each
    # left them open; benchmarks/JOURNAL.md, 2026-12-07): 200 steps of 16 x 4 (~50 s a run on
    # an H100, --jobs 1), an evaluation every 50 steps, before the small corpus overfits
    "gpt2-residual": {
        "preset": "gpt2-124m",
        "fixed": GPT2_CURVE,
        "axes": {"model.residual": ["fp32", "bf16"]},
        "seeds": [1337, 1, 2, 3],
    },
    "gpt2-fp8-head": {
        "preset": "gpt2-124m",
        # the FP8 head replaces the native loss's own head matmul: PyTorch's loss on both sides
        "fixed": {**GPT2_CURVE, "train.cuda_ops": ""},
        "axes": {"model.fp8": ["none", "head"]},
        "seeds": [1337, 1, 2, 3],
    },
    "seconds": {  # a CPU check of the script itself
        "preset": "smoke",
        "fixed": {"train.eval_interval": 2, "train.eval_batches": 1, "train.device": "cpu"},
        "axes": {"train.max_steps": [2, 4], "model.dropout": [0.0, 0.1]},
        "seeds": [1337],
    },
}


def grid_axes(grid: dict) -> dict[str, list]:
    """The swept settings and their values: the grid's axes, or those its points vary."""
    if "axes" in grid:
        return grid["axes"]
    axes: dict[str, list] = {}
    for point in grid["points"]:
        for key, value in point.items():
            if value not in axes.setdefault(key, []):
                axes[key].append(value)
    return axes


def grid_points(grid: dict) -> list[dict]:
    """Every (overrides, seed) of a grid, in a stable order: the cartesian product of its axes,
    or its listed points (the finalists of an earlier sweep), each with every seed."""
    if "axes" in grid:
        axes = grid["axes"]
        settings = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    else:
        settings = grid["points"]
    return [
        {**grid["fixed"], **setting, "train.seed": seed}
        for setting in settings
        for seed in grid["seeds"]
    ]


def run_name(overrides: dict) -> str:
    short = {"train.": "", "model.": ""}
    parts = []
    for key, value in overrides.items():
        name = key
        for prefix, to in short.items():
            name = name.replace(prefix, to)
        parts.append(f"{name}={value}")
    return ",".join(parts).replace("/", "_")


def eval_all_windows(run_dir: Path, log_path: Path) -> dict | None:
    """`gptstack eval --val-windows all` on the run's best/: the loss over every val window, the
    figure the presets' goals are stated in (a training evaluation samples random windows)."""
    out = run_dir / "eval-all.json"
    cmd = [sys.executable, "-m", "gptstack.tools.cli", "eval", "--ckpt", str(run_dir)]
    cmd += ["--val-windows", "all", "--samples", "0", "--no-progress", "--json", str(out)]
    with open(log_path, "a") as log:
        if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
            return None
    scored = json.loads(out.read_text())
    return {
        "val_loss": scored["float"]["val_loss"],
        "val_bits_per_char": scored["float"]["val_bits_per_char"],
        "step": scored["step"],
        "command": cmd[1:],
    }


def train_one(
    preset: str, overrides: dict, runs: Path, deadline: float, log, evaluate: bool = False
) -> dict:
    """One `gptstack train` process; its summary.json, or why there is none. `evaluate`: then
    `gptstack eval` over all val windows (row["eval_all"])."""
    # a point's "name" (not a setting) names its folder, e.g. a teacher a later grid reads
    named = overrides.get("name")
    run_dir = runs / (f"{named},seed={overrides['train.seed']}" if named else run_name(overrides))
    cmd = [sys.executable, "-m", "gptstack.tools.cli", "train", "--preset", preset]
    for key, value in overrides.items():
        if key != "name":
            cmd += ["--set", f"{key}={value}"]
    cmd += ["--out", str(run_dir), "--overwrite", "--no-progress"]
    t0 = time.time()
    row = {"overrides": overrides, "run_dir": str(run_dir), "command": cmd[1:]}
    if time.time() >= deadline:
        return {**row, "returncode": None, "error": "not started: the sweep's deadline passed"}
    with open(runs / f"{run_dir.name}.log", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # gptstack train saves last/ and writes its summary
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    row["returncode"] = proc.returncode
    row["process_s"] = time.time() - t0
    summary = run_dir / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        row.update(
            {
                k: s.get(k)
                for k in (
                    "best_val_loss",
                    "best_val_bpc",
                    "best_step",
                    "last_val_loss",
                    "steps",
                    "max_steps",
                    "wall_time_s",
                    "process_wall_s",
                    "tokens_per_s_median",
                    "evals",
                )
            }
        )
        row["interrupted"] = s.get("steps") != s.get("max_steps")
        if evaluate:
            row["eval_all"] = eval_all_windows(run_dir, runs / f"{run_dir.name}.log")
    else:
        tail = (runs / f"{run_dir.name}.log").read_text().strip().splitlines()[-3:]
        row["error"] = " | ".join(tail)
    scored = row.get("eval_all") or {}
    log(
        f"{run_dir.name}: rc {proc.returncode}, best val {row.get('best_val_loss')} "
        f"({row.get('best_val_bpc')} bits/char) at step {row.get('best_step')}, "
        f"all val windows {scored.get('val_loss')} ({scored.get('val_bits_per_char')} "
        f"bits/char), {row['process_s']:.0f} s"
    )
    return row


def cmd_run(args) -> int:
    import torch

    from gptstack.bench.environment import device_slug, environment

    grid = GRIDS[args.grid]
    points = grid_points(grid)
    if args.limit:
        points = points[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    runs = args.runs or args.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + args.deadline_s
    print(f"sweep {args.grid}: {len(points)} runs, {args.jobs} at a time, {args.deadline_s:.0f} s")

    def log(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(
            pool.map(lambda o: train_one(grid["preset"], o, runs, deadline, log, args.eval), points)
        )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    record = {
        "kind": "recipe-sweep",
        "grid": args.grid,
        "preset": grid["preset"],
        "fixed": grid["fixed"],
        "axes": grid_axes(grid),
        "seeds": grid["seeds"],
        "jobs": args.jobs,
        "runs": rows,
        "environment": environment(device),
    }
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = args.out / f"sweep-{args.grid}-{device_slug(device)}-{stamp}.json"
    write_atomic(path, json.dumps(record, indent=1) + "\n")
    print(f"-> {path}")
    return 0


def _fmt(x, spec=".4f") -> str:
    return "–" if x is None else format(x, spec)


def report(record: dict) -> str:
    """Markdown: the runs grouped by settings (seeds pooled), best bits/char first."""
    axes = list(record["axes"])
    groups: dict[tuple, list[dict]] = {}
    for row in record["runs"]:
        key = tuple(setting(row, a) for a in axes)
        groups.setdefault(key, []).append(row)
    env = record["environment"]
    git = (env.get("git") or {}).get("commit") or env.get("env", {}).get("GPTSTACK_GIT_COMMIT")
    lines = [
        f"## Recipe sweep `{record['grid']}` (preset `{record['preset']}`)",
        "",
        f"{len(record['runs'])} runs of `gptstack train`, {record['jobs']} at a time, on "
        f"{env['device'].get('name')} ({env['date']}, commit {str(git)[:12]}); every run also "
        f"sets {', '.join(f'`{k}={v}`' for k, v in record['fixed'].items())}. Best val loss is "
        "the best evaluation's (nats/token); best step as a share of the run's schedule; "
        "seeds pooled as mean ± spread (max − min), each seed's value in brackets; all val "
        "windows: `gptstack eval --val-windows all` on the run's best/ (every val window, "
        "the figure the goals use; the best val loss above is the training's estimate from "
        "random windows); rows sorted by it where present; wall s is the training loop's "
        + (
            "(median), with the other runs sharing the GPU."
            if record["jobs"] > 1
            else "(median), one run at a time."
        ),
        "",
        "| "
        + " | ".join(a.split(".")[-1] for a in axes)
        + " | seeds | best val loss | best bits/char | all val windows: loss | bits/char"
        + " | best step | of schedule | wall s |",
        "|" + "---|" * (len(axes) + 8),
    ]
    note = GRIDS.get(record["grid"], {}).get("note")
    if note:
        lines[4:4] = [f"Note: {note}", ""]

    def mean_spread(values: list[float]) -> str:
        if not values:
            return "–"
        if len(values) == 1:
            return f"{values[0]:.4f}"
        each = ", ".join(f"{v:.4f}" for v in values)
        return f"{statistics.mean(values):.4f} ± {max(values) - min(values):.4f} ({each})"

    def scored(rows: list[dict], key: str) -> list[float]:
        return [r["eval_all"][key] for r in rows if r.get("eval_all")]

    def score(rows: list[dict]) -> float:  # all val windows where scored, else the estimate
        v = scored(rows, "val_bits_per_char") or [
            r["best_val_bpc"] for r in rows if r.get("best_val_bpc") is not None
        ]
        return statistics.mean(v) if v else float("inf")

    for key, rows in sorted(groups.items(), key=lambda kv: score(kv[1])):
        done = [r for r in rows if r.get("best_val_loss") is not None]
        steps = [r["best_step"] for r in done]
        share = [r["best_step"] / r["max_steps"] for r in done if r.get("max_steps")]
        walls = [r["wall_time_s"] for r in done if r.get("wall_time_s")]
        stopped = [f"{r['steps']:,}" for r in done if r.get("interrupted") and r.get("steps")]
        flag = f" (stopped at {', '.join(stopped)})" if stopped else ""
        lines.append(
            "| "
            + " | ".join(str(k) for k in key)
            + f" | {len(done)}/{len(rows)}{flag}"
            + f" | {mean_spread([r['best_val_loss'] for r in done])}"
            + f" | {mean_spread([r['best_val_bpc'] for r in done])}"
            + f" | {mean_spread(scored(done, 'val_loss'))}"
            + f" | {mean_spread(scored(done, 'val_bits_per_char'))}"
            + f" | {', '.join(f'{s:,}' for s in steps) or '–'}"
            + f" | {', '.join(f'{100 * s:.0f} %' for s in share) or '–'}"
            + f" | {_fmt(statistics.median(walls) if walls else None, '.0f')} |"
        )
    return "\n".join(lines) + "\n"


def setting(row: dict, axis: str):
    """The run's value of a swept setting; "preset" where its point leaves it at the preset's."""
    return row["overrides"].get(axis, "preset")


def plot(record: dict, path: Path) -> Path:
    """Best val bits/char against each swept setting (one panel per axis, a dot per run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = list(record["axes"])
    rows = [r for r in record["runs"] if r.get("best_val_bpc") is not None]
    fig, panels = plt.subplots(1, len(axes), figsize=(3.2 * len(axes), 3.2), sharey=True)
    panels = [panels] if len(axes) == 1 else list(panels)
    for ax, name in zip(panels, axes):
        values = list(record["axes"][name])
        if any(name not in r["overrides"] for r in rows):
            values.append("preset")
        xs = [values.index(setting(r, name)) for r in rows]
        ax.scatter(xs, [r["best_val_bpc"] for r in rows], s=14, alpha=0.6)
        means = []
        for i, _ in enumerate(values):
            picked = [r["best_val_bpc"] for r, x in zip(rows, xs) if x == i]
            means.append(statistics.mean(picked) if picked else float("nan"))
        ax.plot(range(len(values)), means, color="black", lw=1, label="mean")
        best = [
            min((r["best_val_bpc"] for r, x in zip(rows, xs) if x == i), default=None)
            for i in range(len(values))
        ]
        ax.plot(range(len(values)), best, color="tab:green", lw=1, ls="--", label="best")
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
    panels[0].set_ylabel("best val bits/char")
    panels[0].legend(fontsize=7)
    fig.suptitle(f"recipe sweep {record['grid']}: {len(rows)} runs", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cmd_report(args) -> int:
    parts = []
    for path in args.json:
        record = json.loads(path.read_text())
        if record.get("kind") != "recipe-sweep":
            raise SystemExit(f"{path}: not a recipe-sweep record (kind {record.get('kind')!r})")
        png = args.plots / f"{path.stem}.png"
        args.plots.mkdir(parents=True, exist_ok=True)
        plot(record, png)
        rel = os.path.relpath(png, args.md.parent)
        parts.append(
            report(record) + f"\n![{path.stem}]({rel})\n\nFrom [`{path.name}`]"
            f"({os.path.relpath(path, args.md.parent)}).\n"
        )
    head = (
        "# Training-recipe sweeps\n\nGenerated by `python3 benchmarks/recipe_sweep.py report` "
        "from the sweep JSON in `results/`; do not edit by hand.\n\n"
    )
    write_atomic(args.md, head + "\n".join(parts))
    print(f"-> {args.md}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="train every point of a grid, write the sweep JSON")
    run.add_argument("--grid", choices=sorted(GRIDS), required=True)
    run.add_argument("--out", type=Path, required=True, help="folder for the JSON")
    run.add_argument("--runs", type=Path, help="folder for the run directories (default OUT/runs)")
    run.add_argument("--jobs", type=int, default=4, help="runs at a time (default 4)")
    run.add_argument("--deadline-s", type=float, default=540.0, help="stop everything after this")
    run.add_argument("--limit", type=int, default=0, help="only the first N points (0: all)")
    run.add_argument(
        "--eval",
        action="store_true",
        help="after each run, gptstack eval --val-windows all on its best/ (the goals' figure)",
    )
    rep = sub.add_parser("report", help="markdown table and plot from sweep JSON files")
    rep.add_argument("json", type=Path, nargs="+")
    here = Path(__file__).resolve().parent
    rep.add_argument("--md", type=Path, default=here / "SWEEPS.md")
    rep.add_argument("--plots", type=Path, default=here / "plots")
    args = ap.parse_args()
    return cmd_run(args) if args.cmd == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
