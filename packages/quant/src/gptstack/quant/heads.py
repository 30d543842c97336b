"""Steps 3-5 of FORMAT.md section 7 `attention` for the numpy reference: scores, softmax and the
weighted V sum of every head, each sum in the C engine's order.

    out = attend(q, k, k_scale, v, v_scale, start, n_head)   # (B, Tq, C)

The C engine loops over one head and one query at a time and sums over the head's dims (the
q·k dot) and over the keys t (softmax, weighted V) one term after the other. numpy cannot make
those sums faster without reordering them (np.sum is pairwise, BLAS blocks and fuses), so here
the summed index stays an explicit loop, in the same order, and each step of it is one float32
multiply and one add over every (query, key or dim, head, batch) at once. That gives the C bits
for a whole batch of windows at a few times BLAS's cost.
"""

from __future__ import annotations

import numpy as np

from . import fmath

F32 = np.float32


def attend(
    q: np.ndarray,
    k: np.ndarray,
    k_scale: np.ndarray,
    v: np.ndarray,
    v_scale: np.ndarray,
    start: int,
    n_head: int,
) -> np.ndarray:
    """Steps 3-5 of `attention`: queries q (B, Tq, C) at positions start .. start+Tq−1 over the
    cached rows k, v (B, start+Tq, C) (int8, or float32 for act="fp32") with their row scales
    (B, start+Tq) → out (B, Tq, C), each query seeing the keys up to its own position."""
    B, Tq, C = q.shape
    hs, G = C // n_head, B * n_head

    def heads_last(rows: np.ndarray) -> np.ndarray:
        """(B, T', C) → (T', hs, G), head instance g = b·nh + h last and contiguous: every
        float32 step below then runs over long contiguous runs of G (numpy's speed), while
        the summed index (dim i, key t) is an explicit loop in FORMAT.md's order."""
        heads = rows.reshape(B, -1, n_head, hs).transpose(1, 3, 0, 2)
        return np.ascontiguousarray(heads, F32).reshape(-1, hs, G)

    def per_head(row_scales: np.ndarray) -> np.ndarray:
        return np.repeat(row_scales.T, n_head, axis=1)  # (B, T') → (T', G)

    qh, keys, vals = heads_last(q), heads_last(k), heads_last(v)
    # 3. score_t = ((q · kq_t) · ks_t) · (1 / sqrt(hs))
    scores = _head_dots(qh, keys, start) * per_head(k_scale)  # (Tq, start+Tq, G)
    scores *= F32(1) / np.sqrt(F32(hs))
    # 4. softmax over t <= the query's position (the rest masked to -inf: exp gives 0)
    for j in range(Tq - 1):
        scores[j, start + j + 1 :] = -np.inf
    e = fmath.exp(scores - np.max(scores, axis=1, keepdims=True))
    rows = np.arange(Tq)
    running = np.add.accumulate(e, axis=1)  # sequential, t ascending
    w = e / running[rows, start + rows][:, None, :]  # each sum stops at its query
    # 5. out_i = Σ_t (w_t · vs_t) · vq_t[i], t ascending
    out = _weighted_values(w * per_head(v_scale), vals, start)  # (Tq, hs, G)
    return out.reshape(Tq, hs, B, n_head).transpose(2, 0, 3, 1).reshape(B, Tq, C)


# Queries per block of _head_dots: a block computes the dots of keys up to its last query only,
# skipping most of the causally masked half (16 of 64: 62 % of the full work).
_QUERY_BLOCK = 16


def _head_dots(qh: np.ndarray, keys: np.ndarray, start: int) -> np.ndarray:
    """(Tq, Tk, G): Σ_i q_i · k_i over the head's dims, i ascending from i = 0, for every query
    j and key t <= start + j (later keys: 0 or values the mask drops); qh (Tq, hs, G), keys
    (Tk, hs, G). The C loop for all pairs at once: per dim one product and one add per pair."""
    Tq, hs, G = qh.shape
    dots = np.zeros((Tq, keys.shape[0], G), F32)
    for j0 in range(0, Tq, _QUERY_BLOCK):
        j1 = min(Tq, j0 + _QUERY_BLOCK)
        acc = dots[j0:j1, : start + j1]  # a view: written in place
        np.multiply(qh[j0:j1, 0, None, :], keys[None, : start + j1, 0, :], out=acc)
        tmp = np.empty_like(acc)
        for i in range(1, hs):
            np.multiply(qh[j0:j1, i, None, :], keys[None, : start + j1, i, :], out=tmp)
            acc += tmp
    return dots


def _weighted_values(coef: np.ndarray, vals: np.ndarray, start: int) -> np.ndarray:
    """(Tq, hs, G): Σ_t coef_t · v_t for t = 0 … the query's own position start + j, t
    ascending; coef (Tq, Tk, G), vals (Tk, hs, G). A query's sum stops at its position
    (adding the masked keys' zeros could still flip the sign of a zero)."""
    out = coef[:, 0, None, :] * vals[None, 0]
    tmp = np.empty_like(out)
    for t in range(1, coef.shape[1]):
        lo = max(0, t - start)  # queries that see key t
        np.multiply(coef[lo:, t, None, :], vals[None, t], out=tmp[lo:])
        out[lo:] += tmp[lo:]
    return out
