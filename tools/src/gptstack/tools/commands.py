"""What each `gptstack` subcommand does, given its parsed arguments (see cli.py for the flags).

Each command checks what it can before importing torch (config, paths, run directories), so a
mistake is reported in a fraction of a second.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .errors import ConfigError, GptstackError


def _device(name: str):
    from gptstack.model import resolve_device

    return resolve_device(name)


def _write_json(path: Path, data: dict) -> None:
    from gptstack.tokenizer import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2) + "\n")


# --- tokenizer ---------------------------------------------------------------------------


def _load_tokenizer_arg(arg: Path):
    from gptstack.tokenizer import gpt2_tokenizer, load_tokenizer

    return gpt2_tokenizer() if str(arg) == "gpt2" else load_tokenizer(arg)


def cmd_tokenizer_train(args) -> int:
    from tqdm import tqdm

    from gptstack.tokenizer import train_bpe

    from .datasets import read_corpus, resolve_dataset

    path = args.data if args.data else resolve_dataset(args.dataset)
    text = read_corpus(path)
    if args.vocab_size <= 256:
        raise ConfigError(
            f"--vocab-size must be above 256 (the byte tokens), got {args.vocab_size}"
        )
    bar = tqdm(total=args.vocab_size - 256, unit="merge", dynamic_ncols=True)
    start = time.perf_counter()
    tok = train_bpe(
        text,
        args.vocab_size,
        pattern=args.pattern,
        progress=lambda step, total: bar.update(step - bar.n),
    )
    seconds = time.perf_counter() - start
    bar.close()
    tok.save(args.out)
    n_bytes = len(text.encode("utf-8"))
    n_tokens = len(tok.encode(text))
    print(
        f"trained on {path} ({n_bytes:,} bytes) in {seconds:.2f} s: vocab {tok.vocab_size}, "
        f"{n_bytes / n_tokens:.3f} bytes/token -> {args.out}"
    )
    return 0


def cmd_tokenizer_encode(args) -> int:
    tok = _load_tokenizer_arg(args.tokenizer)
    text = args.text if args.text is not None else sys.stdin.read()
    print(" ".join(str(i) for i in tok.encode(text)))
    return 0


def cmd_tokenizer_decode(args) -> int:
    tok = _load_tokenizer_arg(args.tokenizer)
    ids = args.ids if args.ids else [int(x) for x in sys.stdin.read().split()]
    bad = [i for i in ids if not 0 <= i < tok.vocab_size]
    if bad:
        raise GptstackError(
            f"token ids {bad[:5]} are outside this tokenizer's vocabulary 0..{tok.vocab_size - 1}"
        )
    sys.stdout.write(tok.decode(ids) + "\n")
    return 0


# --- train / sample / eval / plot --------------------------------------------------------


def run_config_from_args(args):
    from .checkpoint import read_meta, resolve_checkpoint
    from .config import RunConfig, apply_overrides, load_config_file, load_preset

    if args.preset:
        cfg = load_preset(args.preset)
    elif args.config:
        cfg = load_config_file(args.config)
    elif getattr(args, "resume", None):
        ckpt = resolve_checkpoint(args.resume, prefer="last")
        cfg = RunConfig.from_dict(read_meta(ckpt)["run"], source=f"{ckpt}/config.json")
    else:
        raise ConfigError("say what to train: --preset NAME, --config FILE, or --resume RUN_DIR")
    if getattr(args, "data", None):
        cfg.data.path = str(args.data)
    return apply_overrides(cfg, list(args.overrides))


def cmd_train(args) -> int:
    from .checkpoint import resolve_checkpoint
    from .launch import launch_requested, launch_torchrun
    from .run_dir import check_run_dir

    cfg = run_config_from_args(args)
    if args.resume and not args.out:
        run_dir = resolve_checkpoint(args.resume, prefer="last").parent
    else:
        run_dir = args.out or Path("runs") / cfg.name
    check_run_dir(run_dir, resume=args.resume, overwrite=args.overwrite)  # before torch loads
    if launch_requested(args):  # --nproc-per-node: torchrun runs this command in each process
        return launch_torchrun(args, cfg, run_dir)

    from .distributed import init_world, shutdown_world
    from .plot import plot_run
    from .summary import write_run_summary
    from .train import train

    world = init_world(cfg.train)  # under torchrun: this process's rank; else one process
    try:
        result = train(
            cfg,
            run_dir,
            resume=args.resume,
            overwrite=args.overwrite,
            stop_at=args.stop_at,
            progress=not args.no_progress,
            world=world,
        )
    finally:
        shutdown_world()
    if not world.is_main:
        return 0
    run_dir = result.run_dir  # RUN/teacher when a stop came while the teacher trained
    plot = plot_run(run_dir)
    summary, recorded = write_run_summary(run_dir)
    rate, peak = recorded["tokens_per_s_median"], recorded["peak_memory_bytes"]
    state = "stopped at" if result.interrupted else "finished"
    print(
        f"{state} step {result.step}/{result.max_steps} in {result.wall_time_s:.1f} s"
        + (f" ({rate:,.0f} tokens/s median)" if rate else "")
        + (f", peak GPU memory {peak / 2**30:.1f} GiB" if peak else "")
        + f"; of it evaluations {recorded['eval_s_total']:.1f} s, waiting for checkpoints "
        f"{recorded['checkpoint_s_total']:.1f} s"
    )
    print(
        f"best val loss {result.best_val_loss:.4f} ({result.best_val_bpc:.4f} bits/char) "
        f"-> {run_dir / 'best'}"
    )
    print(
        f"last checkpoint -> {run_dir / 'last'}; metrics -> {run_dir / 'metrics.jsonl'}; "
        f"plot -> {plot}; "
        f"summary -> {summary}"
    )
    stopped_as_asked = args.stop_at is not None and result.step >= args.stop_at
    return 130 if result.interrupted and not stopped_as_asked else 0


def cmd_sample(args) -> int:
    from .checkpoint import load_checkpoint, resolve_checkpoint

    resolve_checkpoint(args.ckpt)  # a wrong path is reported before torch loads
    from .sample import sample

    device = _device(args.device)
    ckpt = load_checkpoint(args.ckpt, device=device)
    result = sample(
        ckpt,
        args.prompt,
        tokens=args.tokens,
        temperature=args.temperature,
        top_k=args.top_k or None,
        top_p=args.top_p,
        seed=args.seed,
        mode=args.mode,
        window=args.window,
        dtype=args.dtype,
        compile=args.compile,
        kernels=args.kernels,
    )
    threads = result.threads.describe() if result.threads else None
    step = ""
    if result.kernels == "gptstack":
        sampler = " and sampler" if result.sampler == "gptstack" else ""
        step = f" (fused gptstack kernels{sampler})"
    print(
        f"[{result.new_tokens} tokens: {result.tokens_per_s:,.1f} tokens/s steady state, "
        f"start-up {result.startup_s:.2f} s; {result.mode} decoding{step}, {result.dtype}, on "
        f"{device}" + (f", {threads}" if threads else "") + "]",
        file=sys.stderr,
    )
    if args.json:
        from gptstack.bench.environment import environment

        _write_json(
            args.json,
            {
                "kind": "sample-run",
                "run": str(ckpt.path),
                "device": str(device),
                "mode": result.mode,
                "dtype": result.dtype,
                "window": args.window,
                "compile": args.compile,
                "kernels": result.kernels,
                "sampler": result.sampler,
                "prompt": args.prompt,
                "new_tokens": result.new_tokens,
                "tokens_per_s": result.tokens_per_s,
                "startup_s": result.startup_s,
                "seconds": result.seconds,
                # the threads of the last phase, and the whole choice in words (threads.py)
                "threads": result.threads.threads if result.threads else None,
                "threads_detail": threads,
                "sampling": {
                    "temperature": args.temperature,
                    "top_k": args.top_k or None,
                    "top_p": args.top_p,
                    "seed": args.seed,
                },
                "environment": environment(device, sys.argv),
            },
        )
        print(f"sample-run record -> {args.json}", file=sys.stderr)
    return 0


def cmd_eval(args) -> int:
    from .val_windows import parse_val_windows

    if not args.ckpt and not args.artifact:
        raise ConfigError("pass --ckpt DIR (float model), --artifact FILE (int8), or both")
    val_windows = parse_val_windows(args.val_windows)
    if args.ckpt:
        from .checkpoint import resolve_checkpoint

        resolve_checkpoint(args.ckpt)  # a wrong path is reported before torch loads
    from .evaluate_cli import run_eval

    results = run_eval(
        args.ckpt,
        args.artifact,
        device=_device(args.device),
        samples=args.samples,
        sample_tokens=args.sample_tokens,
        seed=args.seed,
        val_windows=val_windows,
        progress=not args.no_progress,
    )
    if args.json:
        from gptstack.bench.environment import environment

        results["environment"] = environment(
            _device(args.device), sys.argv
        )  # docs/MEASURING.md rule 6
        _write_json(args.json, results)
        print(f"results -> {args.json}")
    return 0


def cmd_plot(args) -> int:
    from .plot import plot_run, plot_runs

    if len(args.run_dirs) == 1:
        print(f"plot -> {plot_run(args.run_dirs[0], args.out)}")
        return 0
    if args.out is None:
        raise GptstackError(
            f"{len(args.run_dirs)} runs go on one plot: name its file with -o FILE.png"
        )
    print(f"plot -> {plot_runs(args.run_dirs, args.out)}")
    return 0


def cmd_export(args) -> int:
    from .checkpoint import read_meta, resolve_checkpoint

    read_meta(resolve_checkpoint(args.ckpt))  # a wrong path is reported before torch loads
    from .export import export_checkpoint

    result = export_checkpoint(args.ckpt, args.out, target=args.target, clip=args.clip)
    print(result.plan_text)
    print(f"artifact -> {result.path} ({result.path.stat().st_size:,} bytes)")
    return 0


def cmd_pipeline(args) -> int:
    from .pipeline import run_pipeline

    return run_pipeline(args)
