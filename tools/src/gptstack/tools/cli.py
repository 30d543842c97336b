"""The `gptstack` command line. Parsing only: each subcommand calls one function of the tools.

    gptstack pipeline                      the main job: data -> train -> sample -> int8 -> C engine
    gptstack train --preset esp32          train (presets: esp32, shakespeare-char, gpt2-124m, smoke)
    gptstack sample --ckpt runs/esp32 --prompt "ROMEO:"
    gptstack --help                        every subcommand
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from .errors import user_errors


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                   help="where to run (default: cuda if available)")


def build_parser() -> argparse.ArgumentParser:
    from . import commands as c
    from .config import preset_names
    from .defaults import SAMPLING
    from .launch import add_launch_arguments

    parser = argparse.ArgumentParser(
        prog="gptstack",
        description="One GPT through the whole stack: tokenizer, training, int8, ESP32-S3.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("pipeline", help="the main job: data, train esp32, sample, int8 export, C engine, OLED")
    p.add_argument("--out", type=Path, default=Path("runs/pipeline"), help="run directory")
    p.add_argument("--preset", default="esp32", help="preset to train (default esp32)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, help="override the number of training steps")
    p.add_argument("--prompt", default="ROMEO:", help="prompt for the samples")
    p.set_defaults(func=c.cmd_pipeline)

    tok = sub.add_parser("tokenizer", help="train, encode with and decode with a tokenizer")
    tsub = tok.add_subparsers(dest="tokenizer_command", metavar="ACTION", required=True)
    p = tsub.add_parser("train", help="train a byte-level BPE tokenizer")
    p.add_argument("--data", type=Path, help="text file (default: the named --dataset)")
    p.add_argument("--dataset", default="tinyshakespeare")
    p.add_argument("--vocab-size", type=int, default=512)
    p.add_argument("--pattern", default="gpt2", choices=["gpt2", "gpt4"])
    p.add_argument("-o", "--out", type=Path, required=True, help="tokenizer.json to write")
    p.set_defaults(func=c.cmd_tokenizer_train)
    p = tsub.add_parser("encode", help="print the token ids of a text")
    p.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json, or 'gpt2'")
    p.add_argument("text", nargs="?", help="text to encode (default: stdin)")
    p.set_defaults(func=c.cmd_tokenizer_encode)
    p = tsub.add_parser("decode", help="print the text of token ids")
    p.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json, or 'gpt2'")
    p.add_argument("ids", nargs="*", type=int, help="token ids (default: stdin)")
    p.set_defaults(func=c.cmd_tokenizer_decode)

    p = sub.add_parser("train", help="train a model from a preset or config file")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help=f"one of: {', '.join(preset_names())}")
    src.add_argument("--config", type=Path, help="a TOML file with [model] [tokenizer] [data] [train]")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting, e.g. --set train.max_steps=100 (repeatable)")
    p.add_argument("--data", type=Path, help="train on this text file (or folder of .bin shards: "
                   "gptstack data shard) instead of the preset's dataset")
    p.add_argument("--out", type=Path, help="run directory (default runs/PRESET)")
    p.add_argument("--resume", type=Path, help="continue the run in this directory (or its last/)")
    p.add_argument("--stop-at", type=int, metavar="STEP",
                   help="stop after this step, saving last/ (resume later with --resume)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_launch_arguments(p)
    p.set_defaults(func=c.cmd_train)

    p = sub.add_parser("sample", help="generate text from a checkpoint")
    p.add_argument("--ckpt", type=Path, required=True, help="run directory or checkpoint directory")
    p.add_argument("--prompt", default="", help="text to continue (default: start of text)")
    p.add_argument("--tokens", type=int, default=500)
    p.add_argument("--temperature", type=float, default=SAMPLING.temperature,
                   help="softmax temperature, 0 = greedy (default %(default)s)")
    p.add_argument("--top-k", type=int, default=SAMPLING.top_k,
                   help="keep the k most likely tokens, 0 = no top-k (default %(default)s)")
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--mode", default="kv", choices=["naive", "kv", "static"], help="decoding mode")
    _add_device(p)
    p.set_defaults(func=c.cmd_sample)

    p = sub.add_parser("eval", help="val loss, perplexity, bits/char and sample quality")
    p.add_argument("--ckpt", type=Path, help="run directory or checkpoint directory")
    p.add_argument("--artifact", type=Path, help="an int8 .gsm: its val loss beside the float model's")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--samples", type=int, default=10, help="generated samples for word statistics")
    p.add_argument("--sample-tokens", type=int, default=200)
    p.add_argument("--seed", type=int, default=SAMPLING.seed)
    _add_device(p)
    p.set_defaults(func=c.cmd_eval)

    p = sub.add_parser("plot", help="plot a run's loss curves to RUN_DIR/loss.png")
    p.add_argument("run_dir", type=Path)
    p.add_argument("-o", "--out", type=Path)
    p.set_defaults(func=c.cmd_plot)

    for name, helptext in (("quantize", "write the int8 artifact (.gsm) of a checkpoint"),
                           ("export", "quantize for a target and print its memory plan")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--ckpt", type=Path, required=True, help="run directory or checkpoint directory")
        p.add_argument("-o", "--out", type=Path, required=True, help="the .gsm file to write")
        p.add_argument("--target", default="host" if name == "quantize" else "esp32s3",
                       choices=["esp32s3", "host"], help="memory budget to check against")
        p.add_argument("--clip", action="store_true", help="per-row clipping that minimizes squared error")
        p.set_defaults(func=c.cmd_export)

    from .bench_cli import add_bench_parser
    from .data_cli import add_data_parser
    from .firmware_cli import add_firmware_parser

    add_bench_parser(sub)
    add_data_parser(sub)
    add_firmware_parser(sub)
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
        print("interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
