"""`gptstack eval`: a checkpoint's numbers, and an int8 artifact's beside them on the same tokens."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .config import DataSection
from .data import Corpus, prepare_corpus, split_text
from .datasets import read_corpus, resolve_dataset
from .evaluate import evaluate_model, windows


def _print_rows(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(title)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


def _artifact_tokens(corpus: Corpus, block_size: int) -> np.ndarray:
    """The exact tokens the float evaluation scores: full windows of the val split."""
    x, y = windows(corpus.val, block_size)
    return np.concatenate([x.reshape(-1), y[-1:, -1]])


def _int8_results(artifact: Path, tokens: np.ndarray, chars_per_token: float,
                  float_loss: float | None) -> dict[str, Any]:
    from gptstack.quant import evaluate_loss, read_artifact

    art = read_artifact(artifact)
    out: dict[str, Any] = {"artifact": str(artifact), "file_bytes": art.header.file_bytes}
    for act in ("int8", "fp32"):
        r = evaluate_loss(art, tokens, act=act)
        key = "int8" if act == "int8" else "int8_weights_fp32_activations"
        out[key] = {"val_loss": r["loss"], "val_bits_per_char": r["loss"] / math.log(2) / chars_per_token,
                    "n_predictions": r["n_tokens"]}
        if float_loss is not None:
            out[key]["relative_to_float"] = r["loss"] / float_loss - 1.0
    return out


def run_eval(ckpt_path: Path | None, artifact: Path | None, *, device, samples: int,
             sample_tokens: int, seed: int) -> dict[str, Any]:
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
        r = evaluate_model(ckpt.model, corpus, block_size=T, runtime=runtime, samples=samples,
                           sample_tokens=sample_tokens, seed=seed)
        results.update(checkpoint=str(ckpt.path), step=ckpt.meta.get("step"), float=r)
        float_loss = r["val_loss"]
        rows += [("val loss (float)", f"{r['val_loss']:.4f} nats/token over {r['val_tokens']:,} tokens"),
                 ("perplexity", f"{r['perplexity']:.3f}"),
                 ("val bits/char", f"{r['val_bits_per_char']:.4f}")]
        if samples > 0:
            g, h = r["generated"], r["heldout_reference"]
            rows += [("real words", f"{100 * g['real_word_fraction']:.1f}% of {g['words']:,} generated words "
                                    f"(held-out text: {100 * h['real_word_fraction']:.1f}%)"),
                     ("copied 8-grams", f"{100 * g['copied_8gram_fraction']:.2f}% of generated word 8-grams are in "
                                        f"the training split (held-out text: {100 * h['copied_8gram_fraction']:.2f}%)")]
        chars_per_token = corpus.val_chars_per_token
        tokens = _artifact_tokens(corpus, T) if artifact is not None else None
    elif artifact is not None:
        # No checkpoint: score the artifact on Tiny Shakespeare's val split with its own tokenizer tables.
        from gptstack.quant import encode, read_artifact

        art = read_artifact(artifact)
        data = DataSection()  # the default corpus and split: Tiny Shakespeare, last 10 %
        _, val_text = split_text(read_corpus(resolve_dataset(data.dataset)), data.val_fraction)
        tokens = np.asarray(encode(art.tables, val_text), dtype=np.int64)
        chars_per_token = len(val_text) / len(tokens)
    if artifact is not None:
        q = _int8_results(artifact, tokens, chars_per_token, float_loss)
        results["artifact"] = q
        for key, label in (("int8", "val loss (int8 W8A8)"),
                           ("int8_weights_fp32_activations", "val loss (int8 weights, fp32 act.)")):
            rel = q[key].get("relative_to_float")
            extra = f" ({100 * rel:+.2f}% vs float)" if rel is not None else ""
            rows.append((label, f"{q[key]['val_loss']:.4f}{extra}, {q[key]['val_bits_per_char']:.4f} bits/char"))
    _print_rows("evaluation", rows)
    if results.get("float", {}).get("sample_text"):
        print("\nsample:\n" + results["float"]["sample_text"])
    return results
