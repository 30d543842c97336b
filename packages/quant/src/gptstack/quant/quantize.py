"""Symmetric per-row int8 quantization of weights, and a checkpoint → artifact-tensors converter.

    q, scales = quantize_rows(w)              # absmax: scale = max|row| / 127
    q, scales = quantize_rows(w, clip=True)   # per-row clipping threshold minimizing squared error
    spec, tensors = quantize_checkpoint("runs/esp32", tables)

One float32 scale per output row, q in [-127, 127] (FORMAT.md section 4), so the scale factors out
of each int32 dot product (section 7). Rounding here is offline and in float64: the runtime only
reads q and the scales.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .errors import BadConfigError, QuantError
from .format import DTYPE_I8, required_tensors
from .layout import ModelSpec, TensorData
from .tables import TokenizerTables

# Clipping search (clip=True): the threshold is alpha * max|row|. A coarse pass tries alpha on a
# grid of step _COARSE_STEP from _ALPHA_MIN to 1; a fine pass tries step _FINE_STEP within one
# coarse step either side of the best. alpha = 1 (plain absmax) is always a candidate and a row
# keeps it unless another threshold gives a strictly smaller squared error, so clip=True is never
# worse than absmax. For Gaussian rows the optimum is near 0.7-0.9 of absmax; heavy tails pull it
# lower, hence the floor of 0.3.
_ALPHA_MIN = 0.30
_COARSE_STEP = 0.02
_FINE_STEP = 0.002
_ROWS_PER_CHUNK = 4096
_QMAX = 127


def _check_matrix(w: np.ndarray, what: str) -> np.ndarray:
    w = np.asarray(w)
    if w.ndim != 2 or not np.issubdtype(w.dtype, np.floating):
        raise QuantError(f"{what} must be a 2-D float array (rows, cols), got {w.dtype}{w.shape}")
    w = w.astype(np.float32)
    if not np.all(np.isfinite(w)):
        raise QuantError(f"{what} has NaN or infinite values: the checkpoint is damaged")
    return w


def _quantize_with(w: np.ndarray, threshold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantize rows of w (R, K) to int8 with scale threshold/127 per row (R,)."""
    scales = (threshold.astype(np.float32) / np.float32(_QMAX)).astype(np.float32)
    safe = np.where(scales > 0, scales, 1).astype(np.float64)
    q = np.clip(np.rint(w.astype(np.float64) / safe[:, None]), -_QMAX, _QMAX)
    q[scales == 0] = 0
    return q.astype(np.int8), scales


def _row_sq_error(w64: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    q, s = _quantize_with(w64, threshold)
    return np.sum((w64 - q.astype(np.float64) * s.astype(np.float64)[:, None]) ** 2, axis=1)


def _search_clip(w: np.ndarray, absmax: np.ndarray) -> np.ndarray:
    """Per-row threshold minimizing the row's squared error (see the constants above)."""
    w64 = w.astype(np.float64)
    best_t = absmax.astype(np.float32).copy()
    best_e = _row_sq_error(w64, best_t)
    best_a = np.ones(len(w))

    def consider(alpha: np.ndarray) -> None:
        t = (absmax * alpha.astype(np.float32)).astype(np.float32)
        e = _row_sq_error(w64, t)
        better = e < best_e
        best_t[better], best_e[better], best_a[better] = t[better], e[better], alpha[better]

    for a in np.arange(_ALPHA_MIN, 1.0, _COARSE_STEP):
        consider(np.full(len(w), a))
    center = best_a.copy()
    for d in np.arange(-_COARSE_STEP, _COARSE_STEP + _FINE_STEP / 2, _FINE_STEP):
        alpha = np.clip(center + d, _ALPHA_MIN, 1.0)
        consider(alpha)
    return best_t


def quantize_rows(w: np.ndarray, *, clip: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Quantize each row of w (R, K) symmetrically to int8: (q int8 (R, K), scales float32 (R,)).

    absmax (clip=False): scale = max|row| / 127, so |w - q*scale| <= scale/2 everywhere.
    clip=True: scale = c / 127 with the per-row threshold c that minimizes the row's squared
    error (a grid search, never worse than absmax). An all-zero row gets q = 0, scale = 0.
    Raises QuantError for a non-2-D, non-float or non-finite input.
    """
    w = _check_matrix(w, "weight")
    absmax = np.max(np.abs(w), axis=1) if w.shape[1] else np.zeros(len(w), np.float32)
    if not clip:
        return _quantize_with(w, absmax)
    qs, ss = [], []
    for start in range(0, len(w), _ROWS_PER_CHUNK):
        rows = slice(start, start + _ROWS_PER_CHUNK)
        q, s = _quantize_with(w[rows], _search_clip(w[rows], absmax[rows]))
        qs.append(q)
        ss.append(s)
    if not qs:
        return np.zeros(w.shape, np.int8), np.zeros(0, np.float32)
    return np.concatenate(qs), np.concatenate(ss)


def dequantize_rows(q: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 (R, K) = q (R, K) * scales (R,) per row."""
    return np.asarray(q).astype(np.float32) * np.asarray(scales, np.float32)[:, None]


def quantize_tensors(
    spec: ModelSpec, weights: dict[str, np.ndarray], *, clip: bool = False
) -> dict[str, TensorData]:
    """Float tensors (FORMAT.md section 4 names) → artifact tensors: int8 per row or float32.

    Raises QuantError naming missing, unexpected or mis-shaped tensors.
    """
    required = required_tensors(spec)
    names = {name for name, _, _ in required}
    missing = [name for name, _, _ in required if name not in weights]
    extra = sorted(set(weights) - names)
    if missing or extra:
        raise QuantError(
            f"tensors do not match the model config: missing {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}, unexpected {extra[:8]}"
            f"{' ...' if len(extra) > 8 else ''}"
        )
    out: dict[str, TensorData] = {}
    for name, dtype, shape in required:
        w = np.asarray(weights[name])
        if w.shape != shape:
            raise QuantError(f"tensor {name} has shape {w.shape}, the config needs {shape}")
        if dtype == DTYPE_I8:
            out[name] = quantize_rows(w, clip=clip)
        else:
            w = w.astype(np.float32)
            if not np.all(np.isfinite(w)):
                raise QuantError(f"tensor {name} has NaN or infinite values")
            out[name] = w
    return out


def quantize_checkpoint(
    ckpt_dir: str | os.PathLike,
    tables: TokenizerTables,
    *,
    clip: bool = False,
    bos_token: int | None = None,
    layernorm_eps: float = 1e-5,
) -> tuple[ModelSpec, dict[str, TensorData]]:
    """Read `ckpt_dir/config.json` and `ckpt_dir/model.safetensors` and quantize for the artifact.

    config.json's "model" object gives vocab_size, block_size, n_layer, n_head, n_embd, bias (and
    optionally layernorm_eps). The safetensors file holds float tensors named as FORMAT.md
    section 4; `lm_head.weight`, if present, must equal `wte.weight` (tied). Embeddings and
    linear weights become int8 per row, LayerNorm parameters and biases stay float32.
    Returns (spec, tensors) for write_artifact. Raises QuantError naming what is wrong.
    """
    from safetensors.numpy import load_file  # numpy-only loader: no torch

    ckpt = Path(ckpt_dir)
    config_path, weights_path = ckpt / "config.json", ckpt / "model.safetensors"
    for p in (config_path, weights_path):
        if not p.is_file():
            raise QuantError(
                f"checkpoint {ckpt} has no {p.name}: point at a directory written by "
                "`gptstack train`"
            )
    try:
        model_cfg = json.loads(config_path.read_text())["model"]
        spec = ModelSpec(
            vocab_size=model_cfg["vocab_size"],
            block_size=model_cfg["block_size"],
            n_layer=model_cfg["n_layer"],
            n_head=model_cfg["n_head"],
            n_embd=model_cfg["n_embd"],
            bias=model_cfg["bias"],
            layernorm_eps=model_cfg.get("layernorm_eps", layernorm_eps),
            bos_token=bos_token,
        )
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise QuantError(
            f"{config_path}: cannot read the model config ({type(e).__name__}: {e}); "
            'it needs a "model" object with vocab_size, block_size, n_layer, '
            "n_head, n_embd and bias"
        ) from None
    except BadConfigError as e:
        raise QuantError(f"{config_path}: {e}") from None
    try:
        weights = load_file(str(weights_path))
    except Exception as e:  # safetensors raises its own error types (and TypeError for bf16)
        raise QuantError(f"{weights_path}: cannot load ({e}); save float32 tensors") from None
    for name, w in weights.items():
        if not np.issubdtype(w.dtype, np.floating):
            raise QuantError(f"{weights_path}: tensor {name} is {w.dtype}, expected float32")
    head = weights.pop("lm_head.weight", None)
    if head is not None and not np.array_equal(head, weights.get("wte.weight")):
        raise QuantError(
            f"{weights_path}: lm_head.weight differs from wte.weight; the artifact "
            "ties them (FORMAT.md section 4): train with weight tying"
        )
    if tables.n_tokens > spec.vocab_size:
        raise QuantError(
            f"the tokenizer has {tables.n_tokens} tokens but the checkpoint's "
            f"vocab_size is {spec.vocab_size}: use the checkpoint's tokenizer.json"
        )
    return spec, quantize_tensors(spec, weights, clip=clip)
