"""`gptstack data shard`: a text file -> pre-tokenized `.bin` shards for training at scale.

gptstack data shard --data input.txt --tokenizer gpt2 -o data/shards
gptstack train --preset gpt2-124m --data data/shards
"""

from __future__ import annotations

from pathlib import Path


def add_data_parser(sub) -> None:
    data = sub.add_parser("data", help="prepare training data: pre-tokenized .bin shards")
    dsub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    p = dsub.add_parser("shard", help="tokenize a text file into llm.c-format .bin shards")
    p.add_argument("--data", type=Path, required=True, help="UTF-8 text file")
    p.add_argument(
        "--tokenizer",
        required=True,
        help="a tokenizer.json, 'gpt2', or 'char' (the characters of the file)",
    )
    p.add_argument(
        "-o", "--out", type=Path, required=True, help="folder for the shards (new or empty)"
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=0.1,
        help="the last part of the text kept for validation (default %(default)s)",
    )
    p.add_argument(
        "--shard-tokens",
        type=int,
        default=None,
        metavar="N",
        help="tokens per shard file (default 100,000,000)",
    )
    p.set_defaults(func=cmd_data_shard)


def cmd_data_shard(args) -> int:
    from tqdm import tqdm

    from .datasets import read_corpus
    from .shard_corpus import SHARD_TOKENS, check_shard_folder, shard_tokenizer, write_shards

    check_shard_folder(args.out)
    text = read_corpus(args.data)
    tokenizer = shard_tokenizer(args.tokenizer, text)
    with tqdm(total=len(text), unit="char", unit_scale=True, dynamic_ncols=True) as bar:
        meta = write_shards(
            text,
            args.data.name,
            tokenizer,
            args.out,
            val_fraction=args.val_fraction,
            shard_tokens=args.shard_tokens or SHARD_TOKENS,
            progress=bar.update,
        )
    train, val = meta["train"], meta["val"]
    print(
        f"{args.data} -> {args.out}: {len(train['files'])} train shards ({train['tokens']:,} "
        f"tokens), {len(val['files'])} val shards ({val['tokens']:,} tokens), tokenizer.json, "
        f"shards.json; train with --data {args.out}"
    )
    return 0
