"""Evaluation: loss estimates during training, and `gptstack eval` on a checkpoint.

`gptstack eval` reports, on the val split (non-overlapping windows of block_size: all of them, or
on a CPU a fixed subset spread evenly, val_windows.py): val loss,
perplexity and bits per character (loss in bits x tokens / characters, so char and BPE models
compare). Beyond loss, for generated text: the fraction of generated words that are real words of
the training split, and the fraction of generated word 8-grams copied verbatim from the training
split (memorization); the same two numbers for the real held-out text are printed beside them as
the yardstick.

Every loop here shows a progress bar (tqdm, cleared when done) and can be stopped: inside
training, `should_stop` is checked after each batch, so a Ctrl-C is honoured within one batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from gptstack.model import autocast, capture

from .data import Corpus, batch_rng, get_batch
from .defaults import SAMPLING
from .runtime import Runtime
from .threads import DecodeThreads, use_threads
from .val_windows import window_chunks

EVAL_STREAM = 1 << 30  # batch_rng stream id of evaluation batches (training uses step numbers)
# Evaluation batches up to this size (token ids of both splits) are drawn once and kept on the
# device; more (e.g. train.eval_batches = 10**6) are drawn batch by batch at each evaluation
RESIDENT_BYTES = 256 * 2**20
WORD = re.compile(r"[A-Za-z']+")
NGRAM = 8


class EvalInterrupted(Exception):
    """should_stop() turned true during an evaluation (Ctrl-C inside training)."""


def _bar(total: int, desc: str, progress: bool) -> tqdm:
    return tqdm(
        total=total, desc=desc, unit="batch", leave=False, disable=not progress, dynamic_ncols=True
    )


class LossEstimator:
    """Mean loss over fixed random batches of each split, as training evaluates it.

    The batches (the same at every call: seeded by EVAL_STREAM) are drawn once and kept on the
    device (up to RESIDENT_BYTES; beyond, drawn again at each call), the losses add up on the
    device and are read once per split, so an evaluation costs forwards only. On CUDA with
    `cuda_graph`, the forward over one static batch is captured once and replayed for every
    batch (copying each batch in on the device): evaluating the small presets is then no longer
    launch-bound (issue 11).

    world (distributed.World): rank r of W scores the batches r, r + W, ... and the sums are
    all-reduced, so every rank returns the one-process number, W times faster. Every rank runs
    the same number of forwards (a sharded model gathers its weights in each), the last round
    padded with a batch whose loss is not counted.
    """

    def __init__(
        self,
        model,
        corpus: Corpus,
        *,
        batch_size: int,
        block_size: int,
        batches: int,
        seed: int,
        runtime: Runtime,
        cuda_graph: bool = False,
        world=None,
    ) -> None:
        self.model, self.runtime, self.cuda_graph = model, runtime, cuda_graph
        self.world, self.batches = world, batches
        rank, size = (world.rank, world.size) if world is not None else (0, 1)
        rounds = range(rank, -(-batches // size) * size, size)  # padded to a multiple of size
        self._draw = dict(
            tokens={"train": corpus.train, "val": corpus.val},
            batch_size=batch_size,
            block_size=block_size,
            seed=seed,
            rounds=rounds,
        )
        # x and y of both splits, int64
        resident_bytes = 2 * 2 * len(rounds) * batch_size * block_size * 8
        # split -> (x, y, counted) of this rank's batches, drawn now when they fit
        self.splits: dict[str, list[tuple[torch.Tensor, torch.Tensor, bool]] | None] = {
            "train": None,
            "val": None,
        }
        if resident_bytes <= RESIDENT_BYTES:
            for split in self.splits:
                self.splits[split] = list(self._batches(split))
        self._graph = None
        self._static: tuple[torch.Tensor, torch.Tensor] | None = None
        self._static_loss: torch.Tensor | None = None

    @property
    def tokens_per_evaluation(self) -> int:
        """Tokens one evaluation scores, over both splits and every rank (padding excluded)."""
        d = self._draw
        return len(self.splits) * self.batches * d["batch_size"] * d["block_size"]

    def _batches(self, split: str):
        """(x, y, counted) of this rank's batches of `split`, on the device: the resident ones,
        or each drawn now from the same seeded stream (the same batches either way)."""
        if self.splits.get(split) is not None:
            yield from self.splits[split]
            return
        d = self._draw
        split_id = ("train", "val").index(split)
        for i in d["rounds"]:
            rng = batch_rng(d["seed"], EVAL_STREAM, split_id, i % self.batches)
            x, y = get_batch(d["tokens"][split], d["batch_size"], d["block_size"], rng)
            yield (*self.runtime.to_device(x, y), i < self.batches)

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with autocast(
            self.runtime.device, bf16=self.runtime.dtype == "bf16", graph_safe=self.cuda_graph
        ):
            _, loss = self.model(x, y)
        return loss.float()

    def _replayed_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self._graph is None:
            self._static = (x.clone(), y.clone())
            self._graph, self._static_loss = capture(
                lambda: self._loss(*self._static), self.runtime.device
            )
        sx, sy = self._static
        sx.copy_(x)
        sy.copy_(y)
        self._graph.replay()
        return self._static_loss

    @torch.no_grad()
    def __call__(
        self,
        *,
        progress: bool = False,
        desc: str = "eval",
        should_stop: Callable[[], bool] | None = None,
    ) -> dict[str, float]:
        """{"train": loss, "val": loss}. Raises EvalInterrupted as soon as should_stop() is
        true after a batch (checked on the host: no device sync per batch)."""
        was_training = self.model.training
        self.model.eval()
        try:
            totals = []
            with _bar(2 * len(self._draw["rounds"]), desc, progress) as bar:
                for split in self.splits:
                    total = torch.zeros((), device=self.runtime.device)
                    for x, y, counted in self._batches(split):
                        loss = self._replayed_loss(x, y) if self.cuda_graph else self._loss(x, y)
                        if counted:
                            total += loss
                        bar.update(1)
                        if should_stop is not None and should_stop():
                            raise EvalInterrupted
                    totals.append(total)
            if self.world is not None and self.world.size > 1:
                sums = self.world.sum(totals)  # [dist] every rank's share
            else:
                sums = [t.item() for t in totals]  # the one host sync per split
            return {
                split: float(s) / self.batches for split, s in zip(self.splits, sums, strict=True)
            }
        finally:
            self.model.train(was_training)


def windows(tokens: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping (x, y) windows covering the split: (N, T) each, int64."""
    n = (len(tokens) - 1) // block_size
    arr = np.asarray(tokens[: n * block_size + 1], dtype=np.int64)
    return arr[:-1].reshape(n, block_size), arr[1:].reshape(n, block_size)


@torch.no_grad()
def split_loss(
    model,
    tokens: np.ndarray,
    block_size: int,
    runtime: Runtime,
    *,
    chunks: list[range] | None = None,
    batch_size: int = 64,
    progress: bool = False,
) -> tuple[float, int]:
    """Mean next-token loss (nats) over the split's non-overlapping windows (those in `chunks`,
    else all), and the number of predictions it averaged."""
    model.eval()
    x_all, y_all = windows(tokens, block_size)
    if chunks is not None:
        picked = np.concatenate([np.arange(c.start, c.stop) for c in chunks])
        x_all, y_all = x_all[picked], y_all[picked]
    total, count = 0.0, 0
    with _bar(-(-len(x_all) // batch_size), "val loss", progress) as bar:
        for i in range(0, len(x_all), batch_size):
            x, y = runtime.to_device(x_all[i : i + batch_size], y_all[i : i + batch_size])
            with runtime.autocast():
                _, loss = model(x, y)
            total += loss.item() * y.numel()
            count += y.numel()
            bar.update(1)
    return total / count, count


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


def evaluate_model(
    model,
    corpus: Corpus,
    *,
    block_size: int,
    runtime: Runtime,
    val_windows: int | None = None,
    samples: int = 10,
    sample_tokens: int = 200,
    seed: int = 1,
    temperature: float = SAMPLING.temperature,
    top_k: int | None = SAMPLING.top_k,
    progress: bool = False,
) -> dict[str, Any]:
    """Every number `gptstack eval` reports, as one dict (also the JSON it writes).
    val_windows: score that many val windows spread evenly (val_windows.py), None: all."""
    from gptstack.model import stream

    from .sample import prompt_ids

    n_windows = (len(corpus.val) - 1) // block_size
    chunks = window_chunks(n_windows, val_windows)
    n_params = sum(p.numel() for p in model.parameters())
    loss_threads = use_threads(runtime.device, rows=64 * block_size, n_params=n_params)
    val_loss, n_pred = split_loss(
        model, corpus.val, block_size, runtime, chunks=chunks, progress=progress
    )
    result: dict[str, Any] = {
        "val_loss": val_loss,
        "perplexity": math.exp(val_loss),
        "val_bits_per_char": corpus.bits_per_char(val_loss),
        "val_tokens": len(corpus.val),
        "val_windows": sum(len(c) for c in chunks),
        "val_windows_total": n_windows,
        "val_predictions": n_pred,
        "val_chunks": [[c.start, c.stop] for c in chunks],
        "threads": loss_threads.threads if loss_threads else None,
    }
    if samples > 0:
        prompt = prompt_ids(corpus.tokenizer, "")
        start = torch.tensor([prompt] * samples, device=runtime.device)
        # the decoder `gptstack sample` uses on this device; padded vocabulary rows never drawn
        mode = "graph" if runtime.device.type == "cuda" else "kv"
        threads = DecodeThreads(
            runtime.device, batch=samples, prompt_len=len(prompt), block_size=block_size,
            n_params=n_params, mode=mode,
        )  # fmt: skip
        threads.before(0)
        steps = []
        with tqdm(
            total=sample_tokens,
            desc=f"{samples} samples",
            unit="token",
            leave=False,
            disable=not progress,
            dynamic_ncols=True,
        ) as bar:
            for token in stream(
                model,
                start,
                sample_tokens,
                mode=mode,
                temperature=temperature,
                top_k=top_k,
                seed=seed,
                vocab_limit=corpus.tokenizer.vocab_size,
            ):
                steps.append(token.cpu())
                threads.before(len(steps))  # the next token's phase
                bar.update(1)
        out = torch.stack(steps, dim=1) if steps else torch.empty(samples, 0, dtype=torch.long)
        texts = [corpus.tokenizer.decode(row.tolist()) for row in out]
        generated = word_stats("\n".join(texts), corpus.train_text)
        reference = word_stats(corpus.val_text, corpus.train_text)
        result.update(
            samples=samples,
            sample_tokens=sample_tokens,
            temperature=temperature,
            top_k=top_k,
            seed=seed,
            generated=generated,
            heldout_reference=reference,
            sample_text=texts[0],
            sample_threads=threads.describe(),
        )
    return result
