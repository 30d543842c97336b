"""`gptstack eval`: a checkpoint's numbers, and an int8 artifact's beside them on the same tokens.

Float and int8 score the same val windows: all of them on a GPU (and with `--val-windows all`),
a fixed subset spread evenly over the split on a CPU (val_windows.py), where the int8 numpy
reference would otherwise take minutes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from .config import DataSection
from .data import prepare_corpus, split_text
from .datasets import read_corpus, resolve_dataset
from .evaluate import evaluate_model
from .val_windows import chunk_tokens, resolve_val_windows, window_chunks


def _print_rows(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(title)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


def _int8_results(
    artifact: Path,
    tokens: np.ndarray,
    block_size: int,
    chunks: list[range],
    chars_per_token: float,
    float_loss: float | None,
    progress: bool,
) -> dict[str, Any]:
    """The artifact's loss on the windows in `chunks` of `tokens`, in the engine's int8
    arithmetic and with fp32 activations (quant.evaluate_loss per run of adjacent windows)."""
    from gptstack.quant import evaluate_loss, read_artifact

    art = read_artifact(artifact)
    out: dict[str, Any] = {"artifact": str(artifact), "file_bytes": art.header.file_bytes}
    for act in ("int8", "fp32"):
        total, count = 0.0, 0
        for chunk in tqdm(
            chunks,
            desc=f"int8 reference ({act} activations)",
            unit="chunk",
            leave=False,
            disable=not progress,
            dynamic_ncols=True,
        ):
            r = evaluate_loss(art, chunk_tokens(tokens, block_size, chunk), act=act)
            total += r["loss"] * r["n_tokens"]
            count += r["n_tokens"]
        loss = total / count
        key = "int8" if act == "int8" else "int8_weights_fp32_activations"
        out[key] = {
            "val_loss": loss,
            "val_bits_per_char": loss / math.log(2) / chars_per_token,
            "n_predictions": count,
        }
        if float_loss is not None:
            out[key]["relative_to_float"] = loss / float_loss - 1.0
    return out


def run_eval(
    ckpt_path: Path | None,
    artifact: Path | None,
    *,
    device,
    samples: int,
    sample_tokens: int,
    seed: int,
    val_windows: int | str = "auto",
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate a checkpoint, an artifact or both (on the same windows), print the table and
    return the results. val_windows: "auto" (all on a GPU, CPU_VAL_WINDOWS on a CPU), "all" or
    a count."""
    from .checkpoint import load_checkpoint
    from .runtime import Runtime

    results: dict[str, Any] = {}
    rows: list[tuple[str, str]] = []
    float_loss = None
    if ckpt_path is not None:
        ckpt = load_checkpoint(ckpt_path, device=device)
        cfg = ckpt.run_config
        corpus = prepare_corpus(cfg, ckpt.tokenizer)
        T = ckpt.model.config.block_size
        runtime = Runtime(device, "fp32", False, None)
        count = resolve_val_windows(val_windows, runtime.device_type)
        r = evaluate_model(
            ckpt.model,
            corpus,
            block_size=T,
            runtime=runtime,
            val_windows=count,
            samples=samples,
            sample_tokens=sample_tokens,
            seed=seed,
            progress=progress,
        )
        results.update(checkpoint=str(ckpt.path), step=ckpt.meta.get("step"), float=r)
        float_loss = r["val_loss"]
        share = (
            "all"
            if r["val_windows"] == r["val_windows_total"]
            else f"{r['val_windows']} of {r['val_windows_total']}"
        )
        predictions = (
            f"{r['val_loss']:.4f} nats/token over {r['val_predictions']:,} "
            f"predictions ({share} val windows of {T} tokens)"
        )
        rows += [
            ("val loss (float)", predictions),
            ("perplexity", f"{r['perplexity']:.3f}"),
            ("val bits/char", f"{r['val_bits_per_char']:.4f}"),
        ]
        if r["threads"] is not None:
            rows.append(("threads", f"{r['threads']} (CPU thread policy)"))
        if samples > 0:
            g, h = r["generated"], r["heldout_reference"]
            words = (
                f"{100 * g['real_word_fraction']:.1f}% of {g['words']:,} generated words "
                f"(held-out text: {100 * h['real_word_fraction']:.1f}%)"
            )
            copied = (
                f"{100 * g['copied_8gram_fraction']:.2f}% of generated word 8-grams are in "
                f"the training split (held-out text: {100 * h['copied_8gram_fraction']:.2f}%)"
            )
            rows += [("real words", words), ("copied 8-grams", copied)]
        chars_per_token = corpus.val_chars_per_token
        tokens = np.asarray(corpus.val)
        chunks = [range(a, b) for a, b in r["val_chunks"]]
    elif artifact is not None:
        # No checkpoint: score the artifact on Tiny Shakespeare's val split with its own
        # tokenizer tables.
        from gptstack.quant import encode, read_artifact

        art = read_artifact(artifact)
        data = DataSection()  # the default corpus and split: Tiny Shakespeare, last 10 %
        _, val_text = split_text(read_corpus(resolve_dataset(data.dataset)), data.val_fraction)
        tokens = np.asarray(encode(art.tables, val_text), dtype=np.int64)
        chars_per_token = len(val_text) / len(tokens)
        T = art.spec.block_size
        chunks = window_chunks(
            (len(tokens) - 1) // T,
            resolve_val_windows(val_windows, getattr(device, "type", device)),
        )
    if artifact is not None:
        q = _int8_results(artifact, tokens, T, chunks, chars_per_token, float_loss, progress)
        results["artifact"] = q
        for key, label in (
            ("int8", "val loss (int8 W8A8)"),
            ("int8_weights_fp32_activations", "val loss (int8 weights, fp32 act.)"),
        ):
            rel = q[key].get("relative_to_float")
            extra = f" ({100 * rel:+.2f}% vs float)" if rel is not None else ""
            rows.append(
                (
                    label,
                    f"{q[key]['val_loss']:.4f}{extra}, {q[key]['val_bits_per_char']:.4f} bits/char",
                )
            )
    _print_rows("evaluation", rows)
    if results.get("float", {}).get("sample_text"):
        print("\nsample:\n" + results["float"]["sample_text"])
    return results
