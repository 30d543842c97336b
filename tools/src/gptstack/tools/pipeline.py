"""`gptstack pipeline`: the whole stack in one command, each stage saying what it made and where.

data -> tokenizer + training (esp32 preset; the shortened schedule on a CPU, the full one on a GPU)
-> a sample -> the int8 artifact and its ESP32-S3 memory plan -> float vs int8 evaluation -> the
C engine on this host, writing the OLED screen it would show as a PNG.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .config import apply_overrides, load_preset
from .defaults import SAMPLING


def _stage(i: int, n: int, title: str) -> None:
    print(f"\n== [{i}/{n}] {title} " + "=" * max(0, 60 - len(title)), flush=True)


def run_pipeline(args) -> int:
    from .checkpoint import load_checkpoint
    from .data import prepare_corpus
    from .datasets import resolve_dataset
    from .evaluate_cli import run_eval
    from .export import export_checkpoint
    from .firmware_cli import run_engine
    from .plot import plot_run
    from .sample import sample
    from .train import train

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    overrides = list(args.overrides)
    if args.steps is not None:
        overrides += [f"train.max_steps={args.steps}", f"train.cpu_max_steps={args.steps}"]
    cfg = apply_overrides(load_preset(args.preset), overrides)
    n = 6
    t0 = time.perf_counter()

    _stage(1, n, "data")
    if cfg.data.path:
        print(f"corpus: {cfg.data.path}")
    else:
        path = resolve_dataset(cfg.data.dataset)
        print(f"corpus: {cfg.data.dataset} -> {path} ({path.stat().st_size:,} bytes, SHA-256 verified)")
    corpus = prepare_corpus(cfg)
    print(f"tokenizer: {corpus.tokenizer.kind}, vocab {corpus.tokenizer.vocab_size}; "
          f"{len(corpus.train):,} train / {len(corpus.val):,} val tokens")

    _stage(2, n, f"train ({cfg.name})")
    run_dir = out / "train"
    result = train(cfg, run_dir, corpus=corpus)
    plot = plot_run(run_dir)
    print(f"trained {result.step} steps in {result.wall_time_s:.0f} s: best val loss "
          f"{result.best_val_loss:.4f} ({result.best_val_bpc:.4f} bits/char) -> {run_dir / 'best'}; "
          f"loss plot -> {plot}")
    if result.interrupted:
        print(f"stopped early; continue with: gptstack train --resume {run_dir}")
        return 130

    _stage(3, n, "sample (PyTorch, KV cache)")
    ckpt = load_checkpoint(run_dir)
    s = sample(ckpt, args.prompt, tokens=200, temperature=SAMPLING.temperature,
               top_k=SAMPLING.top_k, top_p=SAMPLING.top_p, seed=SAMPLING.seed)
    (out / "sample.txt").write_text(s.text + "\n")
    print(f"[{s.new_tokens} tokens, {s.tokens_per_s:,.0f} tokens/s] -> {out / 'sample.txt'}")

    _stage(4, n, "int8 artifact for the ESP32-S3")
    artifact = out / "model.gsm"
    exported = export_checkpoint(run_dir, artifact, target="esp32s3")
    print(exported.plan_text)
    print(f"artifact -> {artifact} ({artifact.stat().st_size:,} bytes)")

    _stage(5, n, "evaluate: float vs int8 on the same val tokens")
    results = run_eval(run_dir, artifact, device=next(ckpt.model.parameters()).device,
                       samples=4, sample_tokens=200, seed=1)
    (out / "eval.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"results -> {out / 'eval.json'}")

    _stage(6, n, "C engine on this host + OLED screen")
    screen = out / "screen.png"
    proc = run_engine(artifact, args.prompt, tokens=120, seed=SAMPLING.seed,
                      temperature=SAMPLING.temperature, top_k=SAMPLING.top_k,
                      screen=screen, capture=True)
    (out / "engine.txt").write_text(proc.stdout)
    print(proc.stdout.rstrip())
    print(f"engine output -> {out / 'engine.txt'}; OLED screen -> {screen}")
    print(f"\npipeline finished in {time.perf_counter() - t0:.0f} s. Flash it: copy {artifact} to "
          "firmware/esp32/data/model.gsm and run `pio run -d firmware/esp32 -t upload`.")
    return 0
