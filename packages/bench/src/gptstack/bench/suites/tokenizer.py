"""Suite `tokenizer`: how long does BPE training take, and how fast does text encode?

    data = run_tokenizer(data=Path("tinyshakespeare.txt"), vocab_size=512,
                         options=SuiteOptions(out=path))

Training: gptstack's byte-level BPE trainer (`gptstack.tokenizer.train_bpe`, GPT-2 pattern) and
HuggingFace `tokenizers`' BpeTrainer with the ByteLevel pre-tokenizer (GPT-2's regex, the 256
byte alphabet), both to the same vocabulary on the same text, alternated. HF trains on all cores
(rayon); ours on one.

Encoding (MB/s of UTF-8 input): gptstack's trained BPE (encoded by tiktoken), tiktoken's GPT-2
encoding, HF's trained ByteLevel BPE on each chunk as one string, and HF's encode_batch over the
chunk's lines (all cores). The corpus is cut into equal chunks that rotate between samples; each
tokenizer must give decode(encode(chunk)) == chunk on every chunk. HF keeps a word cache inside
its BPE model across calls (its default), as users get it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BenchError
from ..harness import Variant, compare, error_text
from ..results import Column, make_row, ratio_entries
from .common import SuiteContext, SuiteOptions

CHUNKS = 4  # rotating encode inputs
SMOKE_CHARS = 100_000  # --smoke: the first 100k characters of the corpus
OURS_TRAIN, HF_TRAIN = "gptstack train_bpe", "HF tokenizers BpeTrainer (ByteLevel)"
OURS_ENC, TIKTOKEN_ENC = "gptstack BPE (tiktoken)", "tiktoken GPT-2"
HF_ENC, HF_BATCH_ENC = "HF ByteLevel BPE, encode", "HF ByteLevel BPE, encode_batch of lines"


def default_corpus() -> Path:
    from gptstack.tokenizer import default_data_dir

    return default_data_dir() / "tinyshakespeare.txt"


def _hf_trainer(vocab_size: int) -> tuple[Callable[[str], Any] | None, str]:
    """A function text -> trained HF tokenizer, or (None, why not)."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        return None, (
            "HuggingFace `tokenizers` is not installed (a dev dependency of the "
            "workspace: `uv sync`); row skipped"
        )

    def train(text: str):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator([text], trainer)
        return tok

    return train, ""


def _chunks(text: str, n: int) -> list[str]:
    size = len(text) // n
    return [text[i * size : (i + 1) * size] for i in range(n)]


def _train_rows(ctx: SuiteContext, text: str, vocab_size: int, pattern: str) -> dict[str, Any]:
    """Time both trainers; returns the trained tokenizers (for the encode rows)."""
    from gptstack.tokenizer import train_bpe

    trained: dict[str, Any] = {}
    hf_train, why = _hf_trainer(vocab_size)

    def ours(t: str):
        trained[OURS_TRAIN] = train_bpe(t, vocab_size, pattern=pattern)

    variants = [Variant(OURS_TRAIN, ours, [text])]
    if hf_train is not None:
        variants.append(
            Variant(HF_TRAIN, lambda t: trained.__setitem__(HF_TRAIN, hf_train(t)), [text])
        )
    nbytes = len(text.encode())
    group = f"{nbytes:,} bytes → vocab {vocab_size}"
    params = {"vocab_size": vocab_size, "pattern": pattern, "bytes": nbytes}
    ctx.progress.row(f"train {group}")
    cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
    for name in (OURS_TRAIN, HF_TRAIN):
        if name == HF_TRAIN and hf_train is None:
            ctx.result.add_row(
                make_row(
                    section="train",
                    group=group,
                    name=name,
                    params=params,
                    status="skipped",
                    note=why,
                )
            )
            continue
        if name not in cmp.measurements:
            ctx.result.add_row(
                make_row(
                    section="train",
                    group=group,
                    name=name,
                    params=params,
                    status="error",
                    note=cmp.failures.get(name, "did not run"),
                )
            )
            continue
        tok = trained[name]
        vocab = tok.vocab_size if name == OURS_TRAIN else tok.get_vocab_size()
        n_tokens = len(tok.encode(text)) if name == OURS_TRAIN else len(tok.encode(text).ids)
        ctx.result.add_row(
            make_row(
                section="train",
                group=group,
                name=name,
                params=params,
                measurement=cmp.measurements[name],
                ratios=ratio_entries(cmp, name, {"vs_ours": OURS_TRAIN}),
                metrics={
                    "vocab_reached": vocab,
                    "corpus_tokens": n_tokens,
                    "bytes_per_token": nbytes / n_tokens,
                },
                check={"ok": vocab == vocab_size, "against": f"vocabulary of {vocab_size} reached"},
            )
        )
    return trained


def _encoders(trained: dict[str, Any]) -> dict[str, tuple[Callable | None, Callable | None, str]]:
    """name -> (encode, decode, why missing)."""
    out: dict[str, tuple[Callable | None, Callable | None, str]] = {}
    ours = trained.get(OURS_TRAIN)
    out[OURS_ENC] = (
        (ours.encode, ours.decode, "")
        if ours is not None
        else (None, None, "our trainer failed (see the train rows)")
    )
    try:
        from gptstack.tokenizer import gpt2_tokenizer

        enc = gpt2_tokenizer().encoding
        out[TIKTOKEN_ENC] = (enc.encode_ordinary, enc.decode, "")
    except Exception as e:
        out[TIKTOKEN_ENC] = (
            None,
            None,
            f"GPT-2 ranks unavailable offline ({error_text(e)}); "
            f"put gpt2.tiktoken in $GPTSTACK_DATA_DIR",
        )
    hf = trained.get(HF_TRAIN)
    if hf is None:
        why = "no HF tokenizer (see the train rows)"
        out[HF_ENC] = out[HF_BATCH_ENC] = (None, None, why)
    else:
        out[HF_ENC] = (lambda t: hf.encode(t).ids, hf.decode, "")
        out[HF_BATCH_ENC] = (
            lambda t: [i for e in hf.encode_batch(t.splitlines(keepends=True)) for i in e.ids],
            hf.decode,
            "",
        )
    return out


def _encode_rows(ctx: SuiteContext, text: str, trained: dict[str, Any]) -> None:
    chunks = _chunks(text, CHUNKS)
    mean_bytes = sum(len(c.encode()) for c in chunks) / len(chunks)
    group = f"{CHUNKS} rotating chunks of {mean_bytes:,.0f} bytes"
    encoders = _encoders(trained)
    variants, checks = [], {}
    for name, (enc, dec, _) in encoders.items():
        if enc is None:
            continue
        try:
            checks[name] = {
                "ok": all(dec(enc(c)) == c for c in chunks),
                "against": "decode(encode(chunk)) == chunk, every chunk",
            }
        except Exception as e:
            checks[name] = {"ok": False, "against": f"round trip raised {error_text(e)}"}
        variants.append(Variant(name, enc, chunks))
    ctx.progress.row(f"encode {group}")
    cmp = compare(variants, ctx.settings, device=ctx.device, progress=ctx.progress)
    params = {"chunks": CHUNKS, "mean_chunk_bytes": mean_bytes}
    for name, (enc, _, why) in encoders.items():
        if enc is None or name not in cmp.measurements:
            status = "skipped" if enc is None else "error"
            ctx.result.add_row(
                make_row(
                    section="encode",
                    group=group,
                    name=name,
                    params=params,
                    status=status,
                    note=why or cmp.failures.get(name, "?"),
                )
            )
            continue
        m = cmp.measurements[name]
        ctx.result.add_row(
            make_row(
                section="encode",
                group=group,
                name=name,
                params=params,
                measurement=m,
                check=checks[name],
                ratios=ratio_entries(cmp, name, {"vs_ours": OURS_ENC}),
                metrics={"bytes_per_s": mean_bytes / m.stats["median"]},
            )
        )


def run_tokenizer(
    *,
    data: str | os.PathLike | None = None,
    vocab_size: int = 512,
    pattern: str = "gpt2",
    options: SuiteOptions | None = None,
) -> dict[str, Any]:
    """Train-time and encode-speed rows on one corpus (default: Tiny Shakespeare in
    $GPTSTACK_DATA_DIR)."""
    options = options or SuiteOptions()
    path = Path(data) if data is not None else default_corpus()
    if not path.is_file():
        raise BenchError(
            f"corpus {path} not found: pass --data FILE, or set GPTSTACK_DATA_DIR to "
            f"a folder with tinyshakespeare.txt (`gptstack train` downloads it)"
        )
    text = path.read_text(encoding="utf-8")
    if options.smoke:
        text = text[:SMOKE_CHARS]
    if vocab_size <= 256:
        raise BenchError(f"vocab_size is {vocab_size}: byte-level BPE needs more than 256")
    params = {
        "data": str(path),
        "chars": len(text),
        "bytes": len(text.encode()),
        "vocab_size": vocab_size,
        "pattern": pattern,
        "chunks": CHUNKS,
        "threads_available": os.cpu_count(),
    }
    ctx = SuiteContext.create("tokenizer", params, options.on_cpu())
    _declare(ctx)
    trained = _train_rows(ctx, text, vocab_size, pattern)
    _encode_rows(ctx, text, trained)
    return ctx.finish()


def _declare(ctx: SuiteContext) -> None:
    ctx.result.table(
        "BPE training time",
        "train",
        [
            Column("corpus", "group"),
            Column("trainer", "name"),
            Column("s (median, min–max)", "time_s", "time_s"),
            Column("× vs ours", "ratios.vs_ours", "ratio"),
            Column("vocab", "metrics.vocab_reached", "int"),
            Column("bytes/token", "metrics.bytes_per_token", "num"),
            Column("check", "check", "check"),
            Column("note", "note"),
        ],
    )
    ctx.result.table(
        "Encoding speed",
        "encode",
        [
            Column("input", "group"),
            Column("tokenizer", "name"),
            Column("MB/s", "metrics.bytes_per_s", "mbs"),
            Column("ms per chunk (median, min–max)", "time_s", "time_ms"),
            Column("× vs ours", "ratios.vs_ours", "ratio"),
            Column("round trip", "check", "check"),
            Column("note", "note"),
        ],
        about="MB/s = mean chunk bytes / median time per chunk.",
    )
    ctx.result.plot(
        "bars",
        "encode",
        "Encoding speed",
        value="metrics.bytes_per_s",
        label="group",
        series="name",
        log=False,
        ylabel="bytes/s",
    )
