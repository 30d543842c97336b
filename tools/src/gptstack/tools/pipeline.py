"""`gptstack pipeline`: the whole stack in one command, each stage saying what it made and where.

data -> tokenizer + training (esp32 preset; its CPU schedule on a CPU, the full one on a GPU)
-> a sample -> the int8 artifact and its ESP32-S3 memory plan -> float vs int8 evaluation -> the
C engine on this host, writing the OLED screen it would show as a PNG. At the end: the time of
each stage, also in OUT/summary.json (with the machine, the versions and the evaluation).

An output folder that holds a pipeline run is refused unless `--resume OUT` (training continues
from OUT/train/last/, or is skipped when finished, then stages 3-6 run) or `--overwrite`. A
Ctrl-C saves the training checkpoint and says how to resume.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .config import RunConfig, apply_overrides, load_preset
from .defaults import SAMPLING
from .errors import ConfigError, GptstackError
from .run_dir import checkpoint_step, clear_run, describe_run, holds_checkpoints, run_folder

DEFAULT_OUT = Path("runs/pipeline")
DEFAULT_PRESET = "esp32"
# What the pipeline writes into its folder besides train/ (--overwrite deletes exactly these).
OUTPUTS = ("sample.txt", "model.gsm", "eval.json", "engine.txt", "screen.png", "summary.json")
N_STAGES = 6


def _read_summary(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def resolve_out(args) -> tuple[Path, bool]:
    """The pipeline folder and whether this run resumes it; GptstackError when --out holds a run
    and neither --resume nor --overwrite says what to do with it."""
    if args.resume is not None:
        out = Path(args.resume)
        if args.out is not None and Path(args.out).resolve() != out.resolve():
            raise ConfigError(
                f"--resume {out} and --out {args.out}: a resumed pipeline writes "
                "into its own folder; drop --out"
            )
        if args.overwrite:
            raise ConfigError("--resume continues a pipeline and --overwrite deletes it: pass one")
        if args.preset is not None:
            raise ConfigError("--resume takes the preset of the run it continues; drop --preset")
        if not holds_checkpoints(out / "train") and not (out / "summary.json").is_file():
            raise GptstackError(
                f"{out} holds no pipeline run to resume (no {out / 'train'}/last/): "
                f"start one with `gptstack pipeline --out {out}`"
            )
        return out, True
    out = Path(args.out) if args.out is not None else DEFAULT_OUT
    if args.overwrite or not (holds_checkpoints(out / "train") or (out / "summary.json").is_file()):
        return out, False
    if _read_summary(out).get("finished"):
        raise GptstackError(
            f"{out} holds a finished pipeline run: write the new one elsewhere "
            "with --out DIR, or replace it with --overwrite"
        )
    raise GptstackError(
        f"{out} holds an unfinished pipeline run (train/{describe_run(out / 'train')}): "
        f"continue it with `gptstack pipeline --resume {out}`, or start over "
        "with --overwrite (deletes it)"
    )


def _run_config(args, out: Path, resuming: bool) -> RunConfig:
    overrides = list(args.overrides)
    if args.steps is not None:
        overrides += [f"train.max_steps={args.steps}", f"train.cpu_max_steps={args.steps}"]
    last = out / "train" / "last"
    if resuming and (last / "config.json").is_file():
        from .checkpoint import read_meta

        cfg = RunConfig.from_dict(read_meta(last)["run"], source=f"{last}/config.json")
    else:
        cfg = load_preset(args.preset or DEFAULT_PRESET)
    return apply_overrides(cfg, overrides)


class _Stages:
    """Stage headers, their wall times, and OUT/summary.json rewritten after each stage."""

    def __init__(self, out: Path, record: dict[str, Any]) -> None:
        self.out, self.record = out, record
        self.record.setdefault("stages", {})
        self.current = ""

    @contextmanager
    def stage(self, i: int, name: str, title: str) -> Iterator[None]:
        print(f"\n== [{i}/{N_STAGES}] {title} " + "=" * max(0, 60 - len(title)), flush=True)
        self.current = f"[{i}/{N_STAGES}] {name}"
        start = time.perf_counter()
        yield
        self.record["stages"][name] = time.perf_counter() - start
        self.save()

    def save(self) -> None:
        from gptstack.tokenizer import write_atomic

        write_atomic(self.out / "summary.json", json.dumps(self.record, indent=2) + "\n")

    def table(self) -> str:
        times = self.record["stages"]
        width = max(len(k) for k in times)
        lines = [f"  {k:<{width}}  {v:7.1f} s" for k, v in times.items()]
        return f"stage times ({sum(times.values()):.0f} s in all):\n" + "\n".join(lines)


def run_pipeline(args) -> int:
    from .val_windows import parse_val_windows

    out, resuming = resolve_out(args)  # refusals come before anything heavy is imported
    cfg = _run_config(args, out, resuming)
    parse_val_windows(args.val_windows)

    from gptstack.bench.environment import environment
    from gptstack.model import resolve_device
    from gptstack.tokenizer import write_atomic

    from .checkpoint import load_checkpoint
    from .data import prepare_corpus
    from .datasets import resolve_dataset
    from .evaluate_cli import run_eval
    from .export import export_checkpoint
    from .firmware_cli import run_engine
    from .plot import plot_run
    from .sample import sample
    from .summary import write_run_summary
    from .train import train

    progress = not args.no_progress
    run_dir = out / "train"
    t0 = time.perf_counter()
    with run_folder(out):  # created now; removed if the run fails before a checkpoint
        if args.overwrite:
            clear_run(run_dir)
            for name in OUTPUTS:
                (out / name).unlink(missing_ok=True)
        record = {
            "kind": "pipeline",
            "preset": cfg.name,
            "overrides": list(args.overrides),
            "steps": args.steps,
            "prompt": args.prompt,
            "finished": False,
            "environment": environment(resolve_device(cfg.train.device), None),
        }
        if resuming:
            record["stages_before_resume"] = _read_summary(out).get("stages", {})
        stages = _Stages(out, record)
        try:
            with stages.stage(1, "data", "data"):
                if cfg.data.path:
                    print(f"corpus: {cfg.data.path}")
                else:
                    path = resolve_dataset(cfg.data.dataset)
                    print(
                        f"corpus: {cfg.data.dataset} -> {path} ({path.stat().st_size:,} bytes, "
                        "SHA-256 verified)"
                    )
                tokenizer = None
                if resuming and holds_checkpoints(run_dir):
                    from gptstack.tokenizer import load_tokenizer

                    from .checkpoint import resolve_checkpoint

                    tokenizer = load_tokenizer(
                        resolve_checkpoint(run_dir, prefer="last") / "tokenizer.json"
                    )
                corpus = prepare_corpus(cfg, tokenizer)
                print(
                    f"tokenizer: {corpus.tokenizer.kind}, vocab {corpus.tokenizer.vocab_size}; "
                    f"{len(corpus.train):,} train / {len(corpus.val):,} val tokens"
                )

            with stages.stage(2, "train", f"train ({cfg.name})"):
                resume = run_dir if resuming and holds_checkpoints(run_dir) else None
                if resume is not None:
                    print(f"resuming {run_dir} from {describe_run(run_dir)}")
                result = train(cfg, run_dir, resume=resume, corpus=corpus, progress=progress)
                plot = plot_run(run_dir)
                summary_path, _ = write_run_summary(run_dir)
                record["train"] = {
                    "steps": result.step,
                    "max_steps": result.max_steps,
                    "best_val_loss": result.best_val_loss,
                    "best_val_bpc": result.best_val_bpc,
                }
                print(
                    f"trained {result.step} steps ({result.wall_time_s:.0f} s this session): "
                    f"best val loss {result.best_val_loss:.4f} ({result.best_val_bpc:.4f} "
                    f"bits/char) -> {run_dir / 'best'}; loss plot -> {plot}; summary -> "
                    f"{summary_path}"
                )
            if result.interrupted:
                stages.save()
                print(
                    f"stopped at step {checkpoint_step(run_dir / 'last')}; continue with: "
                    f"gptstack pipeline --resume {out}"
                )
                return 130

            with stages.stage(3, "sample", "sample (PyTorch, KV cache)"):
                ckpt = load_checkpoint(run_dir)
                device = next(ckpt.model.parameters()).device
                s = sample(
                    ckpt,
                    args.prompt,
                    tokens=200,
                    temperature=SAMPLING.temperature,
                    top_k=SAMPLING.top_k,
                    top_p=SAMPLING.top_p,
                    seed=SAMPLING.seed,
                )
                write_atomic(out / "sample.txt", s.text + "\n")
                print(
                    f"[{s.new_tokens} tokens, {s.tokens_per_s:,.0f} tokens/s] "
                    f"-> {out / 'sample.txt'}"
                )

            with stages.stage(4, "export", "int8 artifact for the ESP32-S3"):
                artifact = out / "model.gsm"
                exported = export_checkpoint(run_dir, artifact, target="esp32s3")
                print(exported.plan_text)
                print(f"artifact -> {artifact} ({artifact.stat().st_size:,} bytes)")

            with stages.stage(5, "evaluate", "evaluate: float vs int8 on the same val windows"):
                results = run_eval(
                    run_dir,
                    artifact,
                    device=device,
                    samples=4,
                    sample_tokens=200,
                    seed=SAMPLING.seed,
                    val_windows=args.val_windows,
                    progress=progress,
                )
                write_atomic(out / "eval.json", json.dumps(results, indent=2) + "\n")
                record["eval"] = _eval_record(results)
                print(f"results -> {out / 'eval.json'}")

            with stages.stage(6, "engine", "C engine on this host + OLED screen"):
                screen = out / "screen.png"
                proc = run_engine(
                    artifact,
                    args.prompt,
                    tokens=120,
                    seed=SAMPLING.seed,
                    temperature=SAMPLING.temperature,
                    top_k=SAMPLING.top_k,
                    screen=screen,
                    capture=True,
                )
                write_atomic(out / "engine.txt", proc.stdout)
                print(proc.stdout.rstrip())
                print(f"engine output -> {out / 'engine.txt'}; OLED screen -> {screen}")
        except KeyboardInterrupt:
            if holds_checkpoints(run_dir):
                stages.save()
                print(
                    f"\ninterrupted in stage {stages.current}; continue with: "
                    f"gptstack pipeline --resume {out}"
                )
            raise
    record["finished"] = True
    record["total_s"] = time.perf_counter() - t0
    stages.save()
    print(f"\n{stages.table()}")
    print(
        f"\npipeline finished in {record['total_s']:.0f} s -> {out / 'summary.json'}. Flash it: "
        f"copy {artifact} to firmware/esp32/data/model.gsm and run "
        "`pio run -d firmware/esp32 -t upload`."
    )
    return 0


def _eval_record(results: dict[str, Any]) -> dict[str, Any]:
    """The few evaluation numbers summary.json keeps (eval.json has them all)."""
    f, q = results.get("float", {}), results.get("artifact", {})
    return {
        "val_loss_float": f.get("val_loss"),
        "val_predictions": f.get("val_predictions"),
        "val_windows": f.get("val_windows"),
        "val_windows_total": f.get("val_windows_total"),
        "val_loss_int8": q.get("int8", {}).get("val_loss"),
        "real_word_fraction": f.get("generated", {}).get("real_word_fraction"),
    }
