"""`gptstack bench ...`: run the benchmark suites of gptstack.bench and regenerate the report.

    gptstack bench train [--preset esp32 --preset gpt2-124m] [--rungs fp32,bf16,compile]
    gptstack bench generate | attention | ops [--preset NAME ...] [--batch-size B]
    gptstack bench engine [--artifact model.gsm] [--variants release,openmp]
    gptstack bench tokenizer [--data FILE] [--vocab-size 512]
    gptstack bench report                  README.md + plots from benchmarks/results/*.json
    gptstack bench summary FILE.json ...   a short text table of result files

Every suite takes --device, --smoke (CI size, a few repeats), --out DIR (default
benchmarks/results of this checkout) and the harness settings. Model sizes come from the preset
TOML files of gptstack.tools (bench itself cannot import tools); the engine suite gets gs-run
from firmware_host.build_host().
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import GptstackError

SUITE_HELP = {
    "train": "training-step ladder per preset: fp32 -> bf16 -> fused AdamW -> compile -> graphs",
    "generate": "decoding: naive vs KV cache vs static cache + CUDA graph; cache-regime sweeps",
    "attention": "per-head loop vs batched heads; manual vs SDPA (vs native); op and whole model",
    "ops": "LayerNorm, GELU, softmax, SDPA vs torch.compile, against measured floors",
    "engine": "the firmware C engine (gs-run) vs PyTorch fp32 on the CPU, batch 1",
    "tokenizer": "BPE training time and encode MB/s: ours vs HF tokenizers vs tiktoken",
}
DEFAULT_PRESETS = {
    "train": ["esp32", "shakespeare-char", "gpt2-124m"],
    "generate": ["esp32", "shakespeare-char", "gpt2-124m"],
    "attention": ["esp32", "shakespeare-char", "gpt2-124m"],
    "ops": ["esp32", "shakespeare-char", "gpt2-124m"],
}
# A char tokenizer's vocabulary is counted from the corpus at training time; for Tiny
# Shakespeare, the presets' dataset, it is 65 characters (tokenizer README).
CHAR_VOCAB_TINYSHAKESPEARE = 65
GPT2_VOCAB = 50257  # GPT-2's ids, before padding (tokenizer README)
DTYPES = ["auto", "fp32", "bf16", "fp16"]  # gptstack.bench.suites.common.resolve_dtype
# Suite options default to None here: an option left out takes the run_* function's default, so
# each default lives once, in gptstack.bench (the help texts quote it).


def _repo_benchmarks() -> Path:
    """benchmarks/ of the gptstack checkout holding the current directory (an installed wheel
    has no checkout of its own), else ./benchmarks."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "benchmarks" / "results").is_dir() and (folder / "packages").is_dir():
            return folder / "benchmarks"
    return here / "benchmarks"


def preset_shape(name: str, batch_size: int | None = None):
    """The ModelShape of a preset (model sizes, training batch) from its TOML file: the model
    `gptstack train` builds for it (train.model_config, vocabulary padded as there)."""
    from gptstack.bench import ModelShape

    from .config import load_preset
    from .teacher import PRESET_PREFIX
    from .train import model_config

    cfg = load_preset(name)
    tok = cfg.tokenizer
    if tok.kind == "bpe":
        vocab = tok.vocab_size
    elif tok.kind == "gpt2":
        vocab = GPT2_VOCAB
    else:
        vocab = CHAR_VOCAB_TINYSHAKESPEARE
    m = model_config(cfg, vocab)
    teacher = None
    if cfg.train.distill_from.startswith(PRESET_PREFIX):  # its teacher, a preset too
        teacher = preset_shape(cfg.train.distill_from[len(PRESET_PREFIX) :], batch_size)
    return ModelShape(
        name,
        vocab_size=m.vocab_size,
        block_size=m.block_size,
        n_layer=m.n_layer,
        n_head=m.n_head,
        n_embd=m.n_embd,
        batch_size=batch_size or cfg.train.batch_size,
        dropout=m.dropout,
        bias=m.bias,
        teacher=teacher,
    )


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers")


def _add_common(p: argparse.ArgumentParser, *, device: bool = True, presets: bool = True) -> None:
    if device:
        p.add_argument(
            "--device",
            default="auto",
            choices=["auto", "cuda", "cpu"],
            help="where to run (default auto: cuda if available, else cpu)",
        )
        p.add_argument(
            "--compile-backend",
            default="inductor",
            choices=["inductor", "aot_eager", "eager"],
            help="torch.compile backend (default %(default)s; aot_eager: quick CPU "
            "checks of the compile path)",
        )
    if presets:
        p.add_argument(
            "--preset",
            dest="presets",
            action="append",
            metavar="NAME",
            help="model shape from this preset (repeatable; default: see --help)",
        )
        p.add_argument("--batch-size", type=int, help="override every preset's batch size")
    p.add_argument("--smoke", action="store_true", help="CI size: tiny models, a few repeats")
    p.add_argument("--out", type=Path, help="results folder (default: benchmarks/results)")
    p.add_argument("--tag", default="", help="extra word in the result file name")
    p.add_argument("--warmup", type=int, help="warm-up calls per variant (default 3)")
    p.add_argument("--min-repeats", type=int, help="rounds at least, under 1 s/call (default 20)")
    p.add_argument(
        "--min-repeats-slow", type=int, help="rounds at least, over 1 s/call (default 5)"
    )
    p.add_argument("--max-repeats", type=int, help="rounds at most (default 200)")
    p.add_argument("--budget-s", type=float, help="seconds of timed rounds per row (default 3)")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    if device:
        p.add_argument(
            "--threads",
            type=int,
            help="torch CPU threads for every row (torch.set_num_threads; recorded in "
            "the JSON; default: PyTorch's own, one per core)",
        )


def add_bench_parser(sub) -> None:
    bench = sub.add_parser(
        "bench",
        help="benchmark suites (train, generate, attention, ops, engine, tokenizer)",
        description="Time gptstack side by side (alternated rounds, medians, paired ratios) and\n"
        "record each run as JSON under benchmarks/results/; `gptstack bench report`\n"
        "regenerates benchmarks/README.md and its plots from those files.",
        epilog="examples:\n"
        "  gptstack bench train --preset esp32 --rungs fp32,bf16,compile\n"
        "  gptstack bench generate --device cpu --preset esp32\n"
        "  gptstack bench report\n\n"
        "`gptstack bench SUITE --help` lists the options of a suite.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bsub = bench.add_subparsers(dest="bench_command", metavar="SUITE", required=True)

    p = bsub.add_parser("train", help=SUITE_HELP["train"])
    _add_common(p)
    p.add_argument(
        "--rungs",
        type=_csv,
        help="comma-separated rung keys (default: all of fp32,tf32,bf16,fused,graph-eager,"
        "compile,reduce-overhead,graph,regional,native,native-ops,native-mlp,bf16-residual,"
        "native-qkv,native-loss,fp8-head,"
        "fp8,native-attention,ema,distill)",
    )
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: block_size)")
    p.add_argument("--grad-accum", type=int, help="micro-batches per step (default 1)")
    p.set_defaults(func=cmd_train)

    p = bsub.add_parser("generate", help=SUITE_HELP["generate"])
    _add_common(p)
    p.add_argument("--batches", type=_ints, help="batch sizes (default 1,8)")
    p.add_argument(
        "--decoders",
        type=_csv,
        help="of naive,kv,static,graph,graph-compile,graph-decoder,graph-decoder-fused "
        "(default: all but graph-compile; graph-decoder* are `gptstack sample`'s decoder)",
    )
    p.add_argument("--prompt-len", type=int, help="prompt tokens (default block_size/8)")
    p.add_argument("--new-tokens", type=int, help="generated tokens (default min(block/2, 64))")
    p.add_argument(
        "--sweep-prompt",
        type=_ints,
        help="prompt lengths of the sweep (16 new tokens, batch 1; default 8,32,128,512)",
    )
    p.add_argument(
        "--sweep-new",
        type=_ints,
        help="generated lengths of the sweep (4-token prompt, batch 1; default 4,16,64)",
    )
    p.add_argument(
        "--dtype", choices=DTYPES, help="weights dtype (default auto: bf16 on GPU, fp32 on CPU)"
    )
    p.set_defaults(func=cmd_generate)

    for name, func in (("attention", cmd_attention), ("ops", cmd_ops)):
        p = bsub.add_parser(name, help=SUITE_HELP[name])
        _add_common(p)
        p.add_argument("--seq-len", type=int, help="T (default: block_size)")
        p.add_argument("--dtype", choices=DTYPES, help="default auto: bf16 on GPU, fp32 on CPU")
        if name == "ops":
            p.add_argument("--ops", type=_csv, help="registered op names (default: all)")
            p.add_argument(
                "--graph-inner", type=int, help="calls per captured CUDA graph (default 10)"
            )
        p.set_defaults(func=func)

    p = bsub.add_parser("engine", help=SUITE_HELP["engine"])
    _add_common(p, device=False, presets=False)
    p.add_argument(
        "--artifact",
        type=Path,
        help="a .gsm (default: firmware/esp32/data/model.gsm if it exists, else a synthetic one)",
    )
    p.add_argument("--synthetic", action="store_true", help="use a synthetic esp32 artifact")
    p.add_argument(
        "--variants",
        type=_csv,
        default="release,openmp",
        help="host builds of the engine (default %(default)s)",
    )
    p.add_argument("--tokens", type=int, help="tokens to generate (default block_size-1)")
    p.set_defaults(func=cmd_engine)

    p = bsub.add_parser("tokenizer", help=SUITE_HELP["tokenizer"])
    _add_common(p, device=False, presets=False)
    p.add_argument(
        "--data", type=Path, help="text file (default $GPTSTACK_DATA_DIR/tinyshakespeare.txt)"
    )
    p.add_argument("--vocab-size", type=int, help="BPE vocabulary to train (default 512)")
    p.set_defaults(func=cmd_tokenizer)

    p = bsub.add_parser("report", help="regenerate benchmarks/README.md and plots from all results")
    p.add_argument("--results", type=Path, help="results folder (default benchmarks/results)")
    p.add_argument("--readme", type=Path, help="markdown to write (default benchmarks/README.md)")
    p.add_argument("--plots", type=Path, help="plot folder (default benchmarks/plots)")
    p.set_defaults(func=cmd_report)

    p = bsub.add_parser("summary", help="print a short table of result files")
    p.add_argument("files", nargs="+", type=Path, help="result JSON files")
    p.add_argument(
        "--short",
        action="store_true",
        help="only the fastest variant of each row group, and a count of skips/errors",
    )
    p.set_defaults(func=cmd_summary)


# --- running a suite -------------------------------------------------------------------------


def _command(args: argparse.Namespace) -> list[str]:
    """The command line as typed (`python -m gptstack.tools.cli` written as `gptstack`), or
    rebuilt from the parsed options when called programmatically."""
    if sys.argv[1:2] == ["bench"] and args.bench_command in sys.argv[2:3]:
        return ["gptstack", *sys.argv[1:]]
    skip = {"func", "command", "bench_command", "debug"}
    out = ["gptstack", "bench", args.bench_command]
    for key, value in vars(args).items():
        if key in skip or value in (None, False, [], ""):
            continue
        flag = "--" + key.replace("_", "-")
        if key == "presets":
            out += [x for v in value for x in ("--preset", v)]
        elif value is True:
            out.append(flag)
        elif isinstance(value, list):
            out += [flag, ",".join(map(str, value))]
        else:
            out += [flag, str(value)]
    return out


def _settings(args: argparse.Namespace):
    from gptstack.bench import Settings

    base = Settings.smoke() if args.smoke else Settings()
    changes = {
        k: getattr(args, k)
        for k in ("warmup", "min_repeats", "min_repeats_slow", "max_repeats", "budget_s")
        if getattr(args, k, None) is not None
    }
    if changes:
        merged = {**base.to_dict(), **changes}
        merged["max_repeats"] = max(
            merged["max_repeats"], merged["min_repeats"], merged["min_repeats_slow"]
        )
        return Settings(**merged)
    return base


def _shapes(args: argparse.Namespace, suite: str):
    names = args.presets or DEFAULT_PRESETS[suite]
    return [preset_shape(n, args.batch_size) for n in names]


def _run(args: argparse.Namespace, suite: str, call) -> int:
    """Common part of every suite command: result path, settings, summary."""
    import torch

    from gptstack.bench import SuiteOptions, resolve_device, result_path, text_summary

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    out_dir = args.out or (_repo_benchmarks() / "results")
    # BenchError (bad settings, --device cuda without a GPU) reaches the CLI as a user error
    device = resolve_device(getattr(args, "device", "cpu"))
    path = result_path(
        out_dir, suite, device, args.tag + ("smoke" if args.smoke and not args.tag else "")
    )
    notes = ()
    if suite == "train" and device.type == "cpu":
        # the malloc thresholds `gptstack train` sets on a CPU (cpu_memory.py), so the ladder
        # times the step as training runs it
        from .cpu_memory import keep_freed_memory

        notes = (f"gptstack train's CPU memory setting: {keep_freed_memory().describe()}",)
    options = SuiteOptions(
        device=device,
        settings=_settings(args),
        out=path,
        smoke=args.smoke,
        compile_backend=getattr(args, "compile_backend", "inductor"),
        progress=not args.no_progress,
        command=_command(args),
        notes=notes,
    )
    data = call(options)
    print(text_summary([data]))
    print(f"wrote {path}")
    return 0


def _given(args: argparse.Namespace, *names: str) -> dict:
    """The named suite options that were given; the others keep the run_* defaults."""
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def thread_policy(rows: int, n_params: int) -> int:
    """The threads `gptstack train/sample/eval` would use on this CPU (threads.py), for the
    suites' "threads" rows."""
    from .threads import choose_threads

    return choose_threads(rows=rows, n_params=n_params).threads


def cmd_train(args: argparse.Namespace) -> int:
    import torch

    from gptstack.bench import RUNG_KEYS, run_train

    from .runtime import auto_dtype

    return _run(
        args,
        "train",
        lambda o: run_train(
            _shapes(args, "train"),
            rungs=args.rungs or RUNG_KEYS,
            **_given(args, "seq_len", "grad_accum"),
            thread_policy=thread_policy,
            thread_rung=auto_dtype(torch.device("cpu")),
            options=o,
        ),
    )


def cmd_generate(args: argparse.Namespace) -> int:
    from gptstack.bench import run_generate

    return _run(
        args,
        "generate",
        lambda o: run_generate(
            _shapes(args, "generate"),
            **_given(
                args,
                "batches",
                "decoders",
                "prompt_len",
                "new_tokens",
                "sweep_prompt",
                "sweep_new",
                "dtype",
            ),
            thread_policy=thread_policy,
            options=o,
        ),
    )


def cmd_attention(args: argparse.Namespace) -> int:
    from gptstack.bench import run_attention

    return _run(
        args,
        "attention",
        lambda o: run_attention(
            _shapes(args, "attention"), **_given(args, "seq_len", "dtype"), options=o
        ),
    )


def cmd_ops(args: argparse.Namespace) -> int:
    from gptstack.bench import run_ops

    return _run(
        args,
        "ops",
        lambda o: run_ops(
            _shapes(args, "ops"),
            **_given(args, "ops", "seq_len", "dtype", "graph_inner"),
            options=o,
        ),
    )


def _engines(variants: list[str]) -> tuple[dict[str, Path], dict[str, str]]:
    """gs-run of each host build; a build that fails is reported, not fatal."""
    from .firmware_host import VARIANTS, build_host

    found, missing = {}, {}
    for v in variants:
        if v not in VARIANTS:
            raise GptstackError(f"engine variant {v!r} is unknown: use release or openmp")
        try:
            found[v] = build_host(v).gs_run
        except GptstackError as e:
            missing[v] = f"host build failed: {str(e).splitlines()[0]}"
    return found, missing


def cmd_engine(args: argparse.Namespace) -> int:
    from gptstack.bench import run_engine

    from .firmware_host import firmware_dir

    engines, missing = _engines(args.variants)
    artifact = args.artifact
    if artifact is None and not args.synthetic and not args.smoke:
        trained = firmware_dir() / "data" / "model.gsm"
        artifact = trained if trained.is_file() else None
    return _run(
        args,
        "engine",
        lambda o: run_engine(
            preset_shape("esp32"),
            engines=engines,
            unavailable=missing,
            artifact=artifact,
            tokens=args.tokens,
            options=o,
        ),
    )


def cmd_tokenizer(args: argparse.Namespace) -> int:
    from gptstack.bench import run_tokenizer

    return _run(
        args, "tokenizer", lambda o: run_tokenizer(**_given(args, "data", "vocab_size"), options=o)
    )


def cmd_report(args: argparse.Namespace) -> int:
    from gptstack.bench import build_report

    bench = _repo_benchmarks()
    report = build_report(
        args.results or bench / "results",
        args.readme or bench / "README.md",
        args.plots or bench / "plots",
    )
    print(
        f"wrote {report.readme} from {len(report.results)} result file(s), "
        f"{len(report.plots)} plot(s)"
    )
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    from gptstack.bench import BenchError, summarize_files

    try:
        print(summarize_files(args.files, short=args.short))
    except BenchError as e:
        raise GptstackError(str(e)) from e
    return 0
