"""The `gptstack` command line. Parsing only: each subcommand calls one function of the tools.

    gptstack pipeline                      the main job: data -> train -> sample -> int8 -> C engine
    gptstack train --preset esp32          train (esp32, shakespeare-char, gpt2-124m, smoke)
    gptstack sample --ckpt runs/esp32 --prompt "ROMEO:"
    gptstack --help                        every subcommand (`gptstack COMMAND --help`: its options)

Nothing here imports torch: `--help`, `--version`, the tokenizer commands and every error found
before a model is built stay fast. Each option says its default in its help text.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from .errors import user_errors
from .val_windows import CPU_VAL_WINDOWS


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cuda", "cpu"],
        help="where to run (default auto: cuda if available, else cpu)",
    )


def _add_val_windows(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--val-windows",
        default="auto",
        metavar="N|all",
        help="val windows of block_size tokens to score, float and int8 alike: all, or "
        "N spread evenly over the split (default auto: all on a GPU, "
        f"{CPU_VAL_WINDOWS} on a CPU)",
    )


def _versions() -> str:
    """gptstack-tools' version and every member's, from the installed metadata (no imports)."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for member in ("tools", "tokenizer", "model", "quant", "bench"):
        try:
            parts.append(f"{member} {version(f'gptstack-{member}')}")
        except PackageNotFoundError:
            parts.append(f"{member} (not installed)")
    return f"gptstack {parts[0].split()[1]} ({', '.join(parts[1:])})"


def _accept_debug_everywhere(parser: argparse.ArgumentParser) -> None:
    """`--debug` after the subcommand too (`gptstack train --debug ...`): every subparser gets
    the flag, with SUPPRESS as default so a subparser never resets the top-level value."""
    for action in parser._actions:  # argparse has no public walk over subparsers
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if "--debug" not in sub._option_string_actions:
                    sub.add_argument(
                        "--debug",
                        action="store_true",
                        default=argparse.SUPPRESS,
                        help="show tracebacks on errors",
                    )
                _accept_debug_everywhere(sub)


def build_parser() -> argparse.ArgumentParser:
    from . import commands as c
    from .config import preset_names
    from .defaults import SAMPLING, add_sampling_arguments
    from .launch import add_launch_arguments

    parser = argparse.ArgumentParser(
        prog="gptstack",
        description="One GPT through the whole stack: tokenizer, training, int8, ESP32-S3.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=_versions(),
        help="print the versions of gptstack and its packages, then exit",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show tracebacks on errors (also accepted after the subcommand)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "pipeline", help="the main job: data, train esp32, sample, int8 export, C engine, OLED"
    )
    p.add_argument(
        "--out",
        type=Path,
        help="pipeline folder (default runs/pipeline; refused if it "
        "holds a run, unless --resume or --overwrite)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="continue the interrupted pipeline in DIR: training from its last/, then "
        "the stages after it",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --out (its checkpoints are deleted)",
    )
    p.add_argument(
        "--preset", help=f"preset to train (default esp32; one of: {', '.join(preset_names())})"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set train.cpu_max_steps=100 (repeatable)",
    )
    p.add_argument(
        "--steps",
        type=int,
        help="training steps, on a GPU and a CPU alike (default: the preset's schedule)",
    )
    p.add_argument(
        "--prompt", default="ROMEO:", help="prompt for the samples (default %(default)s)"
    )
    _add_val_windows(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=c.cmd_pipeline)

    tok = sub.add_parser("tokenizer", help="train, encode with and decode with a tokenizer")
    tsub = tok.add_subparsers(dest="tokenizer_command", metavar="ACTION", required=True)
    p = tsub.add_parser("train", help="train a byte-level BPE tokenizer")
    p.add_argument("--data", type=Path, help="text file (default: the named --dataset)")
    p.add_argument(
        "--dataset",
        default="tinyshakespeare",
        help="named dataset, used when --data is not given (default %(default)s)",
    )
    p.add_argument(
        "--vocab-size",
        type=int,
        default=512,
        help="tokens in the vocabulary: 256 bytes + the merges learned (default %(default)s)",
    )
    p.add_argument(
        "--pattern",
        default="gpt2",
        choices=["gpt2", "gpt4"],
        help="pre-tokenization regex: GPT-2's or GPT-4's (default %(default)s; the C "
        "engine implements gpt2)",
    )
    p.add_argument("-o", "--out", type=Path, required=True, help="tokenizer.json to write")
    p.set_defaults(func=c.cmd_tokenizer_train)
    p = tsub.add_parser("encode", help="print the token ids of a text")
    p.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json, or 'gpt2'")
    p.add_argument("text", nargs="?", help="text to encode (default: read stdin)")
    p.set_defaults(func=c.cmd_tokenizer_encode)
    p = tsub.add_parser("decode", help="print the text of token ids")
    p.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json, or 'gpt2'")
    p.add_argument("ids", nargs="*", type=int, help="token ids (default: read stdin)")
    p.set_defaults(func=c.cmd_tokenizer_decode)

    p = sub.add_parser("train", help="train a model from a preset or config file")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset", help=f"one of: {', '.join(preset_names())} (default: the config of --resume)"
    )
    src.add_argument(
        "--config", type=Path, help="a TOML file with [model] [tokenizer] [data] [train]"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set train.max_steps=100 (repeatable)",
    )
    p.add_argument(
        "--data",
        type=Path,
        help="train on this text file (or folder of .bin shards: "
        "gptstack data shard) instead of the preset's dataset",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="run directory (default: the --resume directory, else "
        "runs/PRESET; refused if it holds checkpoints, unless --resume or --overwrite)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="continue the run in this directory (or its last/) exactly",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in --out, deleting the run already there",
    )
    p.add_argument(
        "--stop-at",
        type=int,
        metavar="STEP",
        help="stop after this step, saving last/ (resume later with --resume)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_launch_arguments(p)
    p.set_defaults(func=c.cmd_train)

    p = sub.add_parser("sample", help="generate text from a checkpoint")
    p.add_argument("--ckpt", type=Path, required=True, help="run directory or checkpoint directory")
    p.add_argument("--prompt", default="", help="text to continue (default: start of text)")
    p.add_argument(
        "--tokens", type=int, default=500, help="new tokens to generate (default %(default)s)"
    )
    add_sampling_arguments(p)
    p.add_argument(
        "--top-p",
        type=float,
        default=SAMPLING.top_p,
        help="nucleus sampling: keep the likeliest tokens up to this probability "
        "mass (default: off)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the sampler: the same seed writes the same text (default: a fresh one)",
    )
    p.add_argument(
        "--mode",
        default="auto",
        choices=["auto", "naive", "kv", "static", "graph"],
        help="decoder: auto = graph on CUDA (static cache, sampling on the GPU, "
        "CUDA-graph replays), kv on a CPU; naive is the reference",
    )
    p.add_argument(
        "--window",
        default="slide",
        choices=["slide", "halve"],
        help="past the context: slide (the last block_size tokens) or halve (the "
        "C engine's rule; PyTorch then writes what the chip writes)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="weights while sampling (default auto: bf16 on CUDA and on CPUs with native bf16, "
        "else fp32)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the graph decoder's step (fewer kernels, costs start-up)",
    )
    p.add_argument(
        "--kernels",
        default="auto",
        choices=["auto", "gptstack", "torch"],
        help="the graph decoder's one-token step: gptstack = the fused decode kernels of "
        "gptstack.cuda_ops (5 launches a block), torch = PyTorch's modules; auto = gptstack "
        "where it is built with CUDA",
    )
    p.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write a sample-run record (tokens/s, start-up, device) here",
    )
    _add_device(p)
    p.set_defaults(func=c.cmd_sample)

    p = sub.add_parser("eval", help="val loss, perplexity, bits/char and sample quality")
    p.add_argument("--ckpt", type=Path, help="run directory or checkpoint directory (its best/)")
    p.add_argument(
        "--artifact", type=Path, help="an int8 .gsm: its val loss beside the float model's"
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument(
        "--samples",
        type=int,
        default=10,
        help="generated samples for the word statistics, 0 = none (default %(default)s)",
    )
    p.add_argument(
        "--sample-tokens",
        type=int,
        default=200,
        help="tokens per generated sample (default %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=SAMPLING.seed,
        help="seed of the generated samples (default %(default)s)",
    )
    _add_val_windows(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_device(p)
    p.set_defaults(func=c.cmd_eval)

    p = sub.add_parser(
        "plot",
        help="plot a run's loss curves to RUN_DIR/loss.png, or several runs' on one plot (-o)",
    )
    p.add_argument(
        "run_dirs",
        type=Path,
        nargs="+",
        metavar="RUN_DIR",
        help="run directories written by `gptstack train` (several: drawn together)",
    )
    p.add_argument(
        "-o", "--out", type=Path, help="PNG to write (default RUN_DIR/loss.png; needed for several)"
    )
    p.set_defaults(func=c.cmd_plot)

    p = sub.add_parser(
        "export",
        help="quantize a checkpoint to the int8 artifact (.gsm) and "
        "print its memory plan on the target",
    )
    p.add_argument("--ckpt", type=Path, required=True, help="run directory or checkpoint directory")
    p.add_argument("-o", "--out", type=Path, required=True, help="the .gsm file to write")
    p.add_argument(
        "--target",
        default="esp32s3",
        choices=["esp32s3", "host"],
        help="memory budget to check the model against, refusing one that does not "
        "fit (default %(default)s; host: no limit that matters)",
    )
    p.add_argument(
        "--clip", action="store_true", help="per-row clipping that minimizes squared error"
    )
    p.set_defaults(func=c.cmd_export)

    from .bench_cli import add_bench_parser
    from .data_cli import add_data_parser
    from .firmware_cli import add_firmware_parser

    add_bench_parser(sub)
    add_data_parser(sub)
    add_firmware_parser(sub)
    _accept_debug_everywhere(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # gptstack train --nproc-per-node
    try:
        code = args.func(args)
    except Exception as e:
        if not isinstance(e, user_errors()):
            raise
        if args.debug:
            traceback.print_exc()
        print(f"gptstack {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
