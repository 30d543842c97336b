"""Evaluation: loss estimates during training, and `gptstack eval` on a checkpoint.

`gptstack eval` reports, on the whole val split (non-overlapping windows of block_size): val loss,
perplexity and bits per character (loss in bits x tokens / characters, so char and BPE models
compare). Beyond loss, for generated text: the fraction of generated words that are real words of
the training split, and the fraction of generated word 8-grams copied verbatim from the training
split (memorization); the same two numbers for the real held-out text are printed beside them as
the yardstick.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import torch

from .data import Corpus, batch_rng, get_batch
from .defaults import SAMPLING
from .runtime import Runtime

EVAL_STREAM = 1 << 30  # batch_rng stream id of evaluation batches (training uses step numbers)
WORD = re.compile(r"[A-Za-z']+")
NGRAM = 8


@torch.no_grad()
def estimate_loss(model, corpus: Corpus, *, batch_size: int, block_size: int, batches: int,
                  seed: int, runtime: Runtime, world=None) -> dict[str, float]:
    """Mean loss over `batches` random batches of each split; the same batches at every call.

    world (distributed.World): rank r of W scores the batches r, r + W, ... and the sums are
    all-reduced, so every rank returns the one-process number, W times faster. Every rank runs
    the same number of forwards (a sharded model gathers its weights in each), the last round
    padded with a batch whose loss is not counted.
    """
    rank, size = (world.rank, world.size) if world is not None else (0, 1)
    was_training = model.training
    model.eval()
    totals = []
    for split_id, tokens in enumerate((corpus.train, corpus.val)):
        total = 0.0
        for i in range(rank, -(-batches // size) * size, size):
            x, y = runtime.to_device(*get_batch(tokens, batch_size, block_size,
                                                batch_rng(seed, EVAL_STREAM, split_id, i % batches)))
            with runtime.autocast():
                _, loss = model(x, y)
            if i < batches:
                total += loss.item()
        totals.append(total)
    if world is not None:
        totals = world.sum(totals)
    model.train(was_training)
    return {"train": totals[0] / batches, "val": totals[1] / batches}


def windows(tokens: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping (x, y) windows covering the split: (N, T) each, int64."""
    n = (len(tokens) - 1) // block_size
    arr = np.asarray(tokens[: n * block_size + 1], dtype=np.int64)
    return arr[:-1].reshape(n, block_size), arr[1:].reshape(n, block_size)


@torch.no_grad()
def split_loss(model, tokens: np.ndarray, block_size: int, runtime: Runtime, batch_size: int = 64) -> float:
    """Mean next-token loss (nats) over the whole split in non-overlapping windows."""
    model.eval()
    x_all, y_all = windows(tokens, block_size)
    total, count = 0.0, 0
    for i in range(0, len(x_all), batch_size):
        x, y = runtime.to_device(x_all[i : i + batch_size], y_all[i : i + batch_size])
        with runtime.autocast():
            _, loss = model(x, y)
        total += loss.item() * y.numel()
        count += y.numel()
    return total / count


def word_stats(generated: str, train_text: str) -> dict[str, float]:
    """Fraction of generated words that are training words, and of word 8-grams seen in training."""
    train_words = [w.lower() for w in WORD.findall(train_text)]
    vocab = set(train_words)
    train_grams = {tuple(train_words[i : i + NGRAM]) for i in range(len(train_words) - NGRAM + 1)}
    words = [w.lower() for w in WORD.findall(generated)]
    grams = [tuple(words[i : i + NGRAM]) for i in range(len(words) - NGRAM + 1)]
    return {
        "words": len(words),
        "real_word_fraction": sum(w in vocab for w in words) / max(1, len(words)),
        "ngrams": len(grams),
        "copied_8gram_fraction": sum(g in train_grams for g in grams) / max(1, len(grams)),
    }


def evaluate_model(model, corpus: Corpus, *, block_size: int, runtime: Runtime,
                   samples: int = 10, sample_tokens: int = 200, seed: int = 1,
                   temperature: float = SAMPLING.temperature,
                   top_k: int | None = SAMPLING.top_k) -> dict[str, Any]:
    """Every number `gptstack eval` reports, as one dict (also the JSON it writes)."""
    from gptstack.model import generate

    from .sample import prompt_ids

    val_loss = split_loss(model, corpus.val, block_size, runtime)
    result: dict[str, Any] = {
        "val_loss": val_loss,
        "perplexity": math.exp(val_loss),
        "val_bits_per_char": corpus.bits_per_char(val_loss),
        "val_tokens": len(corpus.val),
    }
    if samples > 0:
        start = torch.tensor([prompt_ids(corpus.tokenizer, "")] * samples, device=runtime.device)
        out = generate(model, start, sample_tokens, mode="kv", temperature=temperature,
                       top_k=top_k, seed=seed)
        texts = [corpus.tokenizer.decode(row[1:].tolist()) for row in out.cpu()]
        generated = word_stats("\n".join(texts), corpus.train_text)
        reference = word_stats(corpus.val_text, corpus.train_text)
        result.update(
            samples=samples, sample_tokens=sample_tokens, temperature=temperature, top_k=top_k,
            seed=seed, generated=generated, heldout_reference=reference, sample_text=texts[0],
        )
    return result
