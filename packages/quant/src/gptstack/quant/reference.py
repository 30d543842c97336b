"""Numpy reference of the C engine's int8 arithmetic (FORMAT.md sections 7 and 8).

    session = Session(artifact)              # one sequence, int8 K/V cache, sliding window
    logits = session.feed(token)             # (V,) float32 for the token at session.pos
    logits = forward_sequence(artifact, tokens)   # (B, T') ids -> (B, T', V), causal

Step names and their order follow FORMAT.md section 7 (`quantize_vector`, `linear`, `embed`,
`layernorm`, `gelu`, `attention`, `block`, `logits`); every step works on rows with any leading
dimensions, each row quantized on its own, so the step-by-step and the full-sequence modes share
one code path. float32 throughout, never float64 (the int32 dot products excepted, see `_int_dot`).

Bit for bit with the C engine, and so the two modes with each other: exp and tanh are section 7's
own (`fmath`, not numpy's), and every float sum runs in index order from its first term
(`fmath.seq_sum`, or in `heads` an explicit loop over the summed index that does one float32
multiply and one add per step over a whole block of rows at once), never numpy's pairwise sum or
BLAS.

act="fp32" is a measuring aid of the reference only: activations and the K/V cache stay float32
(weights are still int8 × scale), so `evaluate_loss` can separate the cost of int8 weights from
the cost of int8 activations. The artifact and the C engine always use act="int8".
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from . import fmath
from .artifact import Artifact
from .errors import QuantError
from .heads import attend

F32 = np.float32
ACT_MODES = ("int8", "fp32")
_QMAX = F32(127.0)
# int8 dot products of length K: every partial sum is an integer of magnitude <= 127*127*K, exact
# in float32 while that is <= 2^24, so BLAS sgemm gives the exact int32 result in any summation
# order; longer rows go through float64 (exact to 2^53).
_F32_EXACT_K = 2**24 // (127 * 127)
# GELU tanh form constants (FORMAT.md section 7): sqrt(2/pi) and 0.044715 as float32
_GELU_A = F32(float.fromhex("0x1.988454p-1"))
_GELU_B = F32(float.fromhex("0x1.6e4e26p-5"))


@dataclass
class QLinear:
    """One int8 weight (R, K) as used by `linear`: q transposed to (K, R) as float (exact
    integers), one scale per output row (R,), an optional float32 bias (R,)."""

    qt: np.ndarray
    scales: np.ndarray
    bias: np.ndarray | None
    _qt64: np.ndarray | None = None

    @classmethod
    def from_artifact(cls, art: Artifact, prefix: str, bias: bool) -> QLinear:
        return cls(
            art.tensor(f"{prefix}.weight").T.astype(F32),
            art.scales(f"{prefix}.weight"),
            art.tensor(f"{prefix}.bias") if bias else None,
        )

    @property
    def qt64(self) -> np.ndarray:
        if self._qt64 is None:
            self._qt64 = self.qt.astype(np.float64)
        return self._qt64


@dataclass
class LayerWeights:
    ln_1: tuple[np.ndarray, np.ndarray | None]
    c_attn: QLinear
    attn_proj: QLinear
    ln_2: tuple[np.ndarray, np.ndarray | None]
    c_fc: QLinear
    mlp_proj: QLinear


class Weights:
    """Views of an artifact's tensors arranged for the reference (llama2.c's TransformerWeights)."""

    def __init__(self, art: Artifact) -> None:
        spec = self.spec = art.spec

        def norm(prefix: str) -> tuple[np.ndarray, np.ndarray | None]:
            return (
                art.tensor(f"{prefix}.weight"),
                art.tensor(f"{prefix}.bias") if spec.bias else None,
            )

        self.wte, self.wte_scales = art.tensor("wte.weight"), art.scales("wte.weight")
        self.wpe, self.wpe_scales = art.tensor("wpe.weight"), art.scales("wpe.weight")
        self.layers = [
            LayerWeights(
                norm(f"h.{i}.ln_1"),
                QLinear.from_artifact(art, f"h.{i}.attn.c_attn", spec.bias),
                QLinear.from_artifact(art, f"h.{i}.attn.c_proj", spec.bias),
                norm(f"h.{i}.ln_2"),
                QLinear.from_artifact(art, f"h.{i}.mlp.c_fc", spec.bias),
                QLinear.from_artifact(art, f"h.{i}.mlp.c_proj", spec.bias),
            )
            for i in range(spec.n_layer)
        ]
        self.ln_f = norm("ln_f")
        self.head = QLinear(self.wte.T.astype(F32), self.wte_scales, None)  # tied LM head


_WEIGHTS: weakref.WeakKeyDictionary[Artifact, Weights] = weakref.WeakKeyDictionary()


def weights_of(art: Artifact) -> Weights:
    """The reference's arrangement of an artifact's tensors, built once per artifact."""
    if art not in _WEIGHTS:
        _WEIGHTS[art] = Weights(art)
    return _WEIGHTS[art]


def _check_act(act: str) -> None:
    if act not in ACT_MODES:
        raise QuantError(f"act is {act!r}: use 'int8' (what the engine runs) or 'fp32'")


# --- the steps of FORMAT.md section 7 --------------------------------------------------------


def quantize_vector(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows (..., n) float32 → (q int8 (..., n), s float32 (...)).

    s = max|x| / 127, q = clamp(rint(x · (127 / max|x|)), −127, 127); an all-zero row gives 0, 0.
    """
    q, s = _quantize_rows(x)
    return q.astype(np.int8), s


def _quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_vector with q as float32 integers: what the integer dot multiplies."""
    x = np.asarray(x, F32)
    m = np.max(np.abs(x), axis=-1)
    inv = _QMAX / np.where(m > 0, m, F32(1))
    q = x * inv[..., None]
    np.rint(q, out=q)
    np.clip(q, F32(-127), F32(127), out=q)
    return q, m / _QMAX


def _matmul_rows(x: np.ndarray, wt: np.ndarray) -> np.ndarray:
    """(..., K) @ (K, R) as one 2-D matmul (numpy's batched 3-D path is several times slower)."""
    return (x.reshape(-1, x.shape[-1]) @ wt).reshape(*x.shape[:-1], wt.shape[1])


def _int_dot(q: np.ndarray, w: QLinear) -> np.ndarray:
    """acc (..., R) = Σ_k q[..., k] · W[r, k] for integer-valued q, exact, as (f32)acc."""
    if w.qt.shape[0] <= _F32_EXACT_K:
        return _matmul_rows(np.asarray(q, F32), w.qt)
    return _matmul_rows(q.astype(np.float64), w.qt64).astype(F32)


def linear(x: np.ndarray, w: QLinear, *, act: str = "int8") -> np.ndarray:
    """Rows (..., K) → (..., R): y = ((f32)acc · s) · sW (+ b).

    act="fp32" (reference only): y = (x @ q^T) · sW (+ b), x not quantized.
    """
    if act == "int8":
        q, s = _quantize_rows(x)
        y = _int_dot(q, w)  # a fresh array: scaled in place
        y *= s[..., None]
    else:
        y = _matmul_rows(np.asarray(x, F32), w.qt)
    y *= w.scales
    if w.bias is not None:
        y += w.bias
    return y


def embed(weights: Weights, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Ids (...) and positions (...) → x (..., C) = wte[tok]·swte[tok] + wpe[pos]·swpe[pos]."""
    tok = weights.wte[tokens].astype(F32) * weights.wte_scales[tokens][..., None]
    pos = weights.wpe[positions].astype(F32) * weights.wpe_scales[positions][..., None]
    return tok + pos


def layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
    """Rows (..., C): ((x − mean) · 1/sqrt(var + eps)) · w (+ b), biased variance, both sums
    sequential. b None: no bias (nothing added, as in C, so a -0 stays -0)."""
    C = F32(x.shape[-1])
    mean = fmath.seq_sum(x, keepdims=True) / C
    d = x - mean
    var = fmath.seq_sum(d * d, keepdims=True) / C
    rstd = F32(1) / np.sqrt(var + F32(eps))
    y = (d * rstd) * w
    return y + b if b is not None else y


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh form: (0.5·x)·(1 + tanh(GELU_A·(x + ((GELU_B·x)·x)·x))), elementwise, with
    section 7's tanh; in cache-sized blocks (fmath.blockwise)."""
    return fmath.blockwise(_gelu_block, x)


def _gelu_block(x: np.ndarray) -> np.ndarray:
    inner = _GELU_B * x
    inner *= x
    inner *= x
    inner += x  # x + ((B·x)·x)·x
    inner *= _GELU_A
    t = fmath.tanh(inner)
    t += F32(1)
    t *= F32(0.5) * x
    return t


@dataclass
class KVCache:
    """One sequence's (or batch's) K and V rows for every layer: int8 rows with one scale each
    (float32 rows with scale 1 for act="fp32"). k, v: (L, B, T, C); k_scale, v_scale: (L, B, T)."""

    k: np.ndarray
    v: np.ndarray
    k_scale: np.ndarray
    v_scale: np.ndarray

    @classmethod
    def empty(cls, n_layer: int, batch: int, length: int, n_embd: int, act: str) -> KVCache:
        dtype = np.int8 if act == "int8" else F32
        return cls(
            np.zeros((n_layer, batch, length, n_embd), dtype),
            np.zeros((n_layer, batch, length, n_embd), dtype),
            np.zeros((n_layer, batch, length), F32),
            np.zeros((n_layer, batch, length), F32),
        )


def attention(
    layer: LayerWeights,
    layer_index: int,
    xn: np.ndarray,
    cache: KVCache,
    start: int,
    n_head: int,
    act: str,
) -> np.ndarray:
    """Attention of FORMAT.md section 7 for rows xn (B, Tq, C) at positions start .. start+Tq−1.

    Writes their K and V rows into the cache (quantized per row), then each query attends to the
    cached positions up to and including its own. Returns c_proj of the attention output (B, Tq, C).
    """
    B, Tq, C = xn.shape
    qkv = linear(xn, layer.c_attn, act=act)  # (B, Tq, 3C)
    q, k, v = qkv[..., :C], qkv[..., C : 2 * C], qkv[..., 2 * C :]
    end = start + Tq
    if act == "int8":
        (kq, ks), (vq, vs) = quantize_vector(k), quantize_vector(v)
    else:
        kq, ks, vq, vs = k, np.ones((B, Tq), F32), v, np.ones((B, Tq), F32)
    l = layer_index
    cache.k[l, :, start:end], cache.k_scale[l, :, start:end] = kq, ks
    cache.v[l, :, start:end], cache.v_scale[l, :, start:end] = vq, vs
    out = attend(
        q,
        cache.k[l, :, :end],
        cache.k_scale[l, :, :end],
        cache.v[l, :, :end],
        cache.v_scale[l, :, :end],
        start,
        n_head,
    )
    return linear(out, layer.attn_proj, act=act)


def block(
    weights: Weights, layer_index: int, x: np.ndarray, cache: KVCache, start: int, act: str
) -> np.ndarray:
    """One transformer block on rows x (B, Tq, C) at positions start .. start+Tq−1."""
    spec, layer = weights.spec, weights.layers[layer_index]
    xn = layernorm(x, *layer.ln_1, spec.layernorm_eps)
    x = x + attention(layer, layer_index, xn, cache, start, spec.n_head, act)
    xn = layernorm(x, *layer.ln_2, spec.layernorm_eps)
    return x + linear(gelu(linear(xn, layer.c_fc, act=act)), layer.mlp_proj, act=act)


def logits(weights: Weights, x: np.ndarray, act: str) -> np.ndarray:
    """Rows (..., C) → (..., V): the tied LM head over every row of wte (no bias)."""
    xn = layernorm(x, *weights.ln_f, weights.spec.layernorm_eps)
    return linear(xn, weights.head, act=act)


# --- the two modes ---------------------------------------------------------------------------


def _check_tokens(tokens: np.ndarray, vocab_size: int) -> None:
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        bad = int(tokens.max() if tokens.max() >= vocab_size else tokens.min())
        raise QuantError(f"token id {bad} is outside the model's vocabulary 0 .. {vocab_size - 1}")


def forward_sequence(art: Artifact, tokens: np.ndarray, *, act: str = "int8") -> np.ndarray:
    """Full-sequence mode: ids (B, T') or (T',) at positions 0 .. T'−1 → logits (B, T', V)
    or (T', V).

    T' <= block_size; each row quantized on its own, causal mask. Equals Session.feed step by step
    bit for bit (the same float32 operations in the same order for every row).
    """
    _check_act(act)
    weights = weights_of(art)
    spec = weights.spec
    ids = np.asarray(tokens)
    single = ids.ndim == 1
    ids = ids[None] if single else ids
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise QuantError(f"tokens must be integer ids of shape (B, T'), got {ids.dtype}{ids.shape}")
    B, T = ids.shape
    if not 1 <= T <= spec.block_size:
        raise QuantError(f"sequence length {T} is outside 1 .. block_size {spec.block_size}")
    _check_tokens(ids, spec.vocab_size)
    cache = KVCache.empty(spec.n_layer, B, T, spec.n_embd, act)
    x = embed(weights, ids, np.broadcast_to(np.arange(T), ids.shape))  # (B, T, C)
    for l in range(spec.n_layer):
        x = block(weights, l, x, cache, 0, act)
    out = logits(weights, x, act)  # (B, T, V)
    return out[0] if single else out


class Session:
    """Step-by-step decoding of one sequence (FORMAT.md section 8), as the C engine runs it.

    `feed(token)` runs the token at position `pos` and returns its logits (V,) float32. When the
    window is full (pos == T) the last T/2 ids are re-fed at positions 0 .. T/2−1 first, all in
    one batched pass (each query row still gets exactly its per-token operations, so this equals
    re-feeding them one at a time bit for bit: tests/test_reference.py checks it).
    """

    def __init__(self, art: Artifact, *, act: str = "int8") -> None:
        _check_act(act)
        self.artifact, self.act = art, act
        self.weights = weights_of(art)
        spec = art.spec
        self.cache = KVCache.empty(spec.n_layer, 1, spec.block_size, spec.n_embd, act)
        self.pos = 0
        self.window: list[int] = []

    def reset(self) -> None:
        """Forget the sequence (pos = 0, empty window); the cache rows are overwritten later."""
        self.pos, self.window = 0, []

    def _run(self, tokens: list[int]) -> np.ndarray:
        """The tokens at positions pos, pos+1, … through every block together (one pass over the
        weights, as the C engine's tiles), caching their K/V rows; x (1, n, C)."""
        n = len(tokens)
        x = embed(self.weights, np.array([tokens]), np.arange(self.pos, self.pos + n)[None])
        for l in range(self.artifact.spec.n_layer):
            x = block(self.weights, l, x, self.cache, self.pos, self.act)
        self.pos += n
        self.window.extend(tokens)
        return x

    def feed(self, token: int) -> np.ndarray:
        """Run one token; returns its logits (V,). Raises QuantError for an id outside 0 .. V−1."""
        token = int(token)
        spec = self.artifact.spec
        _check_tokens(np.array([token]), spec.vocab_size)
        if self.pos == spec.block_size:
            keep = self.window[-(spec.block_size // 2) :]
            self.reset()
            self._run(keep)  # the kept ids re-encoded in one batch; their logits go unused
        return logits(self.weights, self._run([token]), self.act)[0, 0]
