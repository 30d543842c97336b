"""The fused one-token decode step: `torch.ops.gptstack.decode_linear` and `decode_attention`.

    qkv = decode_linear(x, w_attn, b_attn, ln_weight=ln1_w, ln_bias=ln1_b)   # (R, 3C)
    y = decode_attention(qkv, k_cache, v_cache, pos)      # writes k, v at pos; (R, C)
    x = decode_linear(y, w_proj, b_proj, residual=x)      # (R, C)
    h = decode_linear(x, w_fc, b_fc, ln_weight=ln2_w, ln_bias=ln2_b, gelu=True)

    x = decode_blocks(token, pos, wte, wpe, layers, k_cache, v_cache)  # every block at once

    y = window_attention(x, w_attn, b_attn, ln_weight=ln1_w, n_head=nh)  # a short slide
                                                   # window's c_attn + attention, x (B, T, C)
    x1 = window_attention(x, w_attn, b_attn, ln_weight=ln1_w, n_head=nh,
                          proj_weight=w_proj, proj_bias=b_proj)  # ... then x + c_proj(y)
    x, y = embedded_window_attention(window, token, wte, wpe, w_attn, b_attn,
                                     ln_weight=ln1_w, n_head=nh)  # window_embed first
    x = window_mlp(y, x, w_proj, b_proj, w_fc, b_fc, w_out, b_out, ln_weight=ln2_w)  # the rest
                    # of its block: c_proj + residual, ln_2, c_fc + GELU, mlp.c_proj + residual

A transformer block in five launches instead of ~28 (formulas and kernel layout: csrc/decode.h,
csrc/decode.cu; CPU reference csrc/decode.cpp). For generation only: no autograd formula, so
calling them on tensors that require grad raises. Both are custom ops with fake kernels, so they
run eagerly, inside CUDA graphs (the position is a device tensor, read by the kernel) and under
torch.compile.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ._checks import direct, float_tensor, like
from ._ext import _C, dl, stream_of, threads
from .attention import causal_attention
from .decode_io import window_embed, window_embed_args
from .errors import OpInputError, OpTypeError

DEFAULT_EPS = 1e-5
# The CUDA kernels' limits (csrc/decode.h): the head size, and K (the widest input row).
MAX_HEAD_SIZE: int = _C.decode_max_head_size
MAX_K: int = _C.decode_max_k
# decode_linear on CUDA in bfloat16 runs on tensor cores (csrc/decode_mma.cuh) from this many rows
# on, for K a multiple of 16 up to MMA_MAX_K (the slide window's step); else the one-row kernel
MMA_MIN_ROWS: int = _C.decode_mma_min_rows
MMA_MAX_K: int = _C.decode_mma_max_k
# decode_linear(split_k=True) splits K over a thread-block cluster of 4 CTAs (sm_90+, bfloat16,
# no LayerNorm, at least MMA_MIN_ROWS rows) at these K (csrc/decode_split.cuh): other bits
SPLIT_WIDTHS: tuple[int, ...] = tuple(_C.decode_split_widths)
# window_attention on CUDA in bfloat16 is one launch up to this many rows a sequence (the
# attention's one key tile) at these head sizes; elsewhere decode_linear and causal_attention
WINDOW_ATTENTION_MAX_T: int = _C.window_attention_max_t
WINDOW_ATTENTION_HEAD_SIZES: tuple[int, ...] = tuple(_C.window_attention_head_sizes)
# window_attention with proj_weight is one launch (a thread-block cluster of the sequence's
# heads, sm_90+) up to this many heads; more: the ops it stands for
WINDOW_ATTENTION_PROJ_MAX_HEADS: int = _C.window_attention_proj_max_heads
# window_mlp on CUDA (sm_90+) in bfloat16 is one launch at these widths (C): a thread-block
# cluster of C/16 CTAs per 32 rows passing x1 and h through distributed shared memory
# (csrc/window_mlp.cuh); elsewhere three decode_linear calls
WINDOW_MLP_WIDTHS: tuple[int, ...] = tuple(_C.window_mlp_widths)
# decode_tail on CUDA (sm_90+) in bfloat16 is one launch at these widths (C): a thread-block
# cluster of C/32 CTAs a row passing x1, h and x2 through distributed shared memory
TAIL_WIDTHS: tuple[int, ...] = tuple(_C.decode_tail_widths)
# decode_blocks: at most this many layers (the CUDA kernel takes the weights by value)
MAX_LAYERS: int = _C.decode_max_layers
# decode_blocks on CUDA: the widest model (n_embd) it takes
BLOCKS_MAX_C: int = _C.decode_blocks_max_c


def blocks_shared_bytes(n_embd: int, head_size: int, block_size: int, dtype: torch.dtype) -> int:
    """The dynamic shared memory one CTA of CUDA decode_blocks needs at the least (one weight
    slice of its 16-CTA cluster, the step's vectors as floats): a caller compares it with the
    GPU's opt-in limit per block before choosing decode_blocks."""
    elem = torch.empty((), dtype=dtype).element_size()
    return _C.decode_blocks_shared_bytes(n_embd, head_size, block_size, elem)


# decode_blocks' tensors of one layer, in order (None allowed for the biases)
LAYER_TENSORS = (
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias",
)  # fmt: skip


def _decode_linear_impl(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    ln_weight: Tensor | None,
    ln_bias: Tensor | None,
    residual: Tensor | None,
    eps: float,
    gelu: bool,
    split_k: bool = False,
) -> Tensor:
    out = torch.empty(x.size(0), weight.size(0), dtype=x.dtype, device=x.device)
    _C.decode_linear(
        dl(out), dl(x), dl(weight), dl(bias), dl(ln_weight), dl(ln_bias), dl(residual), eps, gelu,
        split_k, stream_of(x), threads(),
    )  # fmt: skip
    return out


_decode_linear = torch.library.custom_op("gptstack::decode_linear", mutates_args=())(
    _decode_linear_impl
)


@_decode_linear.register_fake
def _decode_linear_fake(x, weight, bias, ln_weight, ln_bias, residual, eps, gelu, split_k=False):
    return torch.empty(x.size(0), weight.size(0), dtype=x.dtype, device=x.device)


def _decode_attention_impl(qkv: Tensor, k_cache: Tensor, v_cache: Tensor, pos: Tensor) -> Tensor:
    y = torch.empty(qkv.size(0), qkv.size(1) // 3, dtype=qkv.dtype, device=qkv.device)
    _C.decode_attention(dl(y), dl(qkv), dl(k_cache), dl(v_cache), dl(pos), stream_of(qkv))
    return y


_decode_attention = torch.library.custom_op(
    "gptstack::decode_attention", mutates_args=("k_cache", "v_cache")
)(_decode_attention_impl)


@_decode_attention.register_fake
def _decode_attention_fake(qkv, k_cache, v_cache, pos):
    return torch.empty(qkv.size(0), qkv.size(1) // 3, dtype=qkv.dtype, device=qkv.device)


def decode_linear(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    *,
    ln_weight: Tensor | None = None,
    ln_bias: Tensor | None = None,
    residual: Tensor | None = None,
    gelu: bool = False,
    eps: float = DEFAULT_EPS,
    split_k: bool = False,
) -> Tensor:
    """out = act(weight @ layernorm(x) + bias) + residual for each row of x.

    x (R, K); weight (N, K) as nn.Linear stores it; bias (N,); ln_weight / ln_bias (K,): a
    LayerNorm of each row first (ln_bias needs ln_weight); residual (R, N), added last; gelu:
    the tanh GELU after the bias. One dtype throughout (float32 or bfloat16; float64 on the
    CPU), contiguous, one device; computed in float32, rounded once. Returns (R, N).
    split_k: on CUDA (sm_90+) in bfloat16, without a LayerNorm, with at least MMA_MIN_ROWS rows
    and K in SPLIT_WIDTHS, K split over a thread-block cluster of 4 CTAs (more SMs for a wide
    product on few rows: the slide window's mlp.c_proj); the result is deterministic but of
    other bits than without (4 partial sums added in a fixed order). Elsewhere it changes
    nothing. Raises OpTypeError / OpInputError naming the argument.
    """
    op = "decode_linear"
    float_tensor(op, "x", x, min_dim=2)
    if x.dim() != 2:
        raise OpInputError(f"{op}: x must be (rows, K), got shape {tuple(x.shape)}")
    R, K = x.shape
    like(op, "x", x, "weight", weight)
    if weight.dim() != 2 or weight.size(1) != K:
        raise OpInputError(
            f"{op}: weight must be (N, {K}) for x of shape {tuple(x.shape)}, got "
            f"{tuple(weight.shape)}"
        )
    N = weight.size(0)
    for name, t, shape in (
        ("bias", bias, (N,)),
        ("ln_weight", ln_weight, (K,)),
        ("ln_bias", ln_bias, (K,)),
        ("residual", residual, (R, N)),
    ):
        if t is not None:
            like(op, "x", x, name, t, shape=shape)
    if ln_bias is not None and ln_weight is None:
        raise OpInputError(f"{op}: ln_bias without ln_weight; pass both, or ln_weight alone")
    for name, flag in (("gelu", gelu), ("split_k", split_k)):
        if not isinstance(flag, bool):
            raise OpTypeError(f"{op}: {name} must be True or False, got {flag!r}")
    op = (
        _decode_linear_impl
        if direct(x, weight, bias, ln_weight, ln_bias, residual)
        else _decode_linear
    )
    return op(x, weight, bias, ln_weight, ln_bias, residual, float(eps), gelu, split_k)


def decode_attention(qkv: Tensor, k_cache: Tensor, v_cache: Tensor, pos: Tensor) -> Tensor:
    """One query per row against its cache: writes k and v at `pos`, returns y (R, C).

    qkv (R, 3C): c_attn's output, [q | k | v], head h at columns [h*hs, (h+1)*hs) of each block.
    k_cache, v_cache (R, nh, T, hs) with C = nh * hs, same dtype as qkv, contiguous (written in
    place). pos: int64 tensor of one element on qkv's device, 0 <= pos < T (read on the device,
    so a CUDA graph replays with the current position; out of range gives NaN, not a write).
    Raises OpTypeError / OpInputError naming the argument.
    """
    op = "decode_attention"
    float_tensor(op, "qkv", qkv, min_dim=2)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        like(op, "qkv", qkv, name, t)
        if t.dim() != 4:
            raise OpInputError(f"{op}: {name} must be (R, nh, T, hs), got {tuple(t.shape)}")
    R, nh, T, hs = k_cache.shape
    if tuple(v_cache.shape) != (R, nh, T, hs):
        raise OpInputError(
            f"{op}: v_cache has shape {tuple(v_cache.shape)} but k_cache {tuple(k_cache.shape)}"
        )
    if tuple(qkv.shape) != (R, 3 * nh * hs):
        raise OpInputError(
            f"{op}: qkv must be ({R}, {3 * nh * hs}) for caches of shape {tuple(k_cache.shape)}, "
            f"got {tuple(qkv.shape)}"
        )
    if not isinstance(pos, Tensor) or pos.dtype != torch.int64 or pos.numel() != 1:
        raise OpTypeError(f"{op}: pos must be an int64 tensor of one element, got {pos!r}")
    if pos.device != qkv.device:
        raise OpInputError(f"{op}: pos is on {pos.device} but qkv is on {qkv.device}")
    op = _decode_attention_impl if direct(qkv, k_cache, v_cache, pos) else _decode_attention
    return op(qkv, k_cache, v_cache, pos)


def _decode_blocks_impl(
    token: Tensor,
    pos: Tensor,
    wte: Tensor,
    wpe: Tensor,
    layers: list[Tensor | None],
    k_cache: Tensor,
    v_cache: Tensor,
    eps: float,
) -> Tensor:
    out = torch.empty(k_cache.size(1), wte.size(1), dtype=wte.dtype, device=wte.device)
    _C.decode_blocks(
        dl(out), dl(token), dl(pos), dl(wte), dl(wpe), [dl(t) for t in layers], dl(k_cache),
        dl(v_cache), eps, stream_of(wte), threads(),
    )  # fmt: skip
    return out


_decode_blocks = torch.library.custom_op(
    "gptstack::decode_blocks", mutates_args=("k_cache", "v_cache")
)(_decode_blocks_impl)


@_decode_blocks.register_fake
def _decode_blocks_fake(token, pos, wte, wpe, layers, k_cache, v_cache, eps):
    return torch.empty(k_cache.size(1), wte.size(1), dtype=wte.dtype, device=wte.device)


def decode_blocks(
    token: Tensor,
    pos: Tensor,
    wte: Tensor,
    wpe: Tensor,
    layers: Sequence[Tensor | None],
    k_cache: Tensor,
    v_cache: Tensor,
    *,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """The residual stream (B, C) after every block of a one-token step, writing each layer's
    new key and value at `pos`: the embedding, then per layer the five ops of this module's
    docstring. On CUDA one launch (a thread-block cluster per row, csrc/decode_blocks.cu), the
    same bits as those five ops; on the CPU, those ops in order.

    token (B,) or (B, 1) int64; pos: int64 tensor of one element (0 <= pos < T, read on the
    device; out of range, or a token outside wte, gives NaN rows and writes nothing).
    wte (vocab, C), wpe (positions, C). layers: LAYER_TENSORS of layer 0, then of layer 1, ...
    (12 per layer, each shaped as in nn.Linear / nn.LayerNorm; None for a missing bias).
    k_cache, v_cache (n_layer, B, nh, T, hs), C = nh * hs, written in place. One float dtype
    throughout, contiguous, one device. Raises OpTypeError / OpInputError naming the argument.
    """
    op = "decode_blocks"
    float_tensor(op, "wte", wte, min_dim=2)
    like(op, "wte", wte, "wpe", wpe)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        like(op, "wte", wte, name, t)
        if t.dim() != 5:
            raise OpInputError(
                f"{op}: {name} must be (n_layer, B, nh, T, hs), got {tuple(t.shape)}"
            )
    layers = list(layers)
    if len(layers) != len(LAYER_TENSORS) * k_cache.size(0):
        raise OpInputError(
            f"{op}: layers must hold {len(LAYER_TENSORS)} tensors per layer "
            f"({len(LAYER_TENSORS) * k_cache.size(0)} for a cache of {k_cache.size(0)} layers), "
            f"got {len(layers)}"
        )
    for i, t in enumerate(layers):
        if t is not None:
            like(op, "wte", wte, f"layer {i // 12} {LAYER_TENSORS[i % 12]}", t)
    for name, t in (("token", token), ("pos", pos)):
        if not isinstance(t, Tensor) or t.dtype != torch.int64:
            raise OpTypeError(f"{op}: {name} must be an int64 tensor, got {t!r}")
        if t.device != wte.device:
            raise OpInputError(f"{op}: {name} is on {t.device} but wte is on {wte.device}")
    impl = _decode_blocks_impl if direct(wte, *layers) else _decode_blocks
    return impl(token, pos, wte, wpe, layers, k_cache, v_cache, float(eps))


def _window_attention_impl(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    ln_weight: Tensor,
    ln_bias: Tensor | None,
    proj_weight: Tensor | None,
    proj_bias: Tensor | None,
    n_head: int,
    eps: float,
) -> Tensor:
    y = torch.empty_like(x)
    if x.is_cuda and _C.window_attention(
        dl(y), dl(x), dl(weight), dl(bias), dl(ln_weight), dl(ln_bias), dl(proj_weight),
        dl(proj_bias), n_head, eps, stream_of(x),
    ):  # fmt: skip
        return y
    # no fused kernel for this call: the ops it stands for
    B, T, C = x.shape
    if proj_weight is not None:
        y = window_attention(x, weight, bias, ln_weight=ln_weight, ln_bias=ln_bias, n_head=n_head,
                             eps=eps)  # fmt: skip
        x1 = decode_linear(
            y.reshape(B * T, C), proj_weight, proj_bias, residual=x.reshape(B * T, C)
        )
        return x1.view(B, T, C)
    qkv = decode_linear(
        x.reshape(B * T, C), weight, bias, ln_weight=ln_weight, ln_bias=ln_bias, eps=eps
    ).view(B, T, 3 * C)
    q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in qkv.split(C, dim=2))
    return causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)


_window_attention = torch.library.custom_op("gptstack::window_attention", mutates_args=())(
    _window_attention_impl
)


@_window_attention.register_fake
def _window_attention_fake(x, weight, bias, ln_weight, ln_bias, proj_weight, proj_bias, n_head,
                           eps):  # fmt: skip
    return torch.empty_like(x)


def _attention_args(
    op: str, ref_name: str, ref: Tensor, n_head: object, **tensors: Tensor | None
) -> None:
    """A block attention's n_head and tensors checked against ref (its last dimension C):
    weight (3C, C), ln_weight (C,) required; bias (3C,), ln_bias (C,), proj_weight (C, C),
    proj_bias (C,) where given."""
    C = ref.size(-1)
    if not isinstance(n_head, int) or isinstance(n_head, bool) or n_head < 1 or C % n_head:
        raise OpInputError(f"{op}: n_head = {n_head!r} must be a positive divisor of C = {C}")
    shapes = {"weight": (3 * C, C), "bias": (3 * C,), "ln_weight": (C,), "ln_bias": (C,),
              "proj_weight": (C, C), "proj_bias": (C,)}  # fmt: skip
    for name, t in tensors.items():
        if t is not None or name in ("weight", "ln_weight"):
            like(op, ref_name, ref, name, t, shape=shapes[name])


def window_attention(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    *,
    ln_weight: Tensor,
    ln_bias: Tensor | None = None,
    n_head: int,
    eps: float = DEFAULT_EPS,
    proj_weight: Tensor | None = None,
    proj_bias: Tensor | None = None,
) -> Tensor:
    """A block's attention over a slide window: y = causal self-attention of the n_head heads
    of qkv = decode_linear(x, weight, bias, ln_weight=, ln_bias=) for each sequence of x; with
    proj_weight, x + the attention's output projection instead:
    decode_linear(y, proj_weight, proj_bias, residual=x).

    x (B, T, C); weight (3C, C), bias (3C,): c_attn, q then k then v rows, head h at rows
    [h*hs, (h+1)*hs) of each; ln_weight / ln_bias (C,): ln_1; proj_weight (C, C), proj_bias
    (C,): attn.c_proj. Returns y (B, T, C), head h at columns [h*hs, (h+1)*hs), or x1 (B, T, C).
    On CUDA in bfloat16 with T <= WINDOW_ATTENTION_MAX_T and head size 32 or 64 it is one launch
    (csrc/window_attention.cuh), the same bits as the ops it stands for (with proj_weight where
    the GPU has thread-block clusters and n_head <= WINDOW_ATTENTION_PROJ_MAX_HEADS);
    otherwise those ops, decode_linear then causal_attention (head sizes 32, 64 or 128), then
    decode_linear. For generation: no autograd formula. Raises OpTypeError / OpInputError
    naming the argument.
    """
    op = "window_attention"
    float_tensor(op, "x", x, min_dim=3)
    if x.dim() != 3:
        raise OpInputError(f"{op}: x must be (B, T, C), got shape {tuple(x.shape)}")
    if proj_bias is not None and proj_weight is None:
        raise OpInputError(f"{op}: proj_bias was given without proj_weight")
    _attention_args(op, "x", x, n_head, weight=weight, bias=bias, ln_weight=ln_weight,
                    ln_bias=ln_bias, proj_weight=proj_weight, proj_bias=proj_bias)  # fmt: skip
    args = (x, weight, bias, ln_weight, ln_bias, proj_weight, proj_bias)
    impl = _window_attention_impl if direct(*args) else _window_attention
    return impl(*args, n_head, float(eps))


def _embedded_window_attention_impl(
    window: Tensor,
    token: Tensor,
    wte: Tensor,
    wpe: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    ln_weight: Tensor,
    ln_bias: Tensor | None,
    n_head: int,
    eps: float,
) -> tuple[Tensor, Tensor]:
    B, T = window.shape
    x = torch.empty(B, T, wte.size(1), dtype=wte.dtype, device=wte.device)
    y = torch.empty_like(x)
    if x.is_cuda and _C.embedded_window_attention(
        dl(y), dl(x), dl(window), dl(token), dl(wte), dl(wpe), dl(weight), dl(bias),
        dl(ln_weight), dl(ln_bias), n_head, eps, stream_of(x),
    ):  # fmt: skip
        return x, y
    # no fused kernel for this call: the two ops it stands for
    x = window_embed(window, token, wte, wpe)
    y = window_attention(x, weight, bias, ln_weight=ln_weight, ln_bias=ln_bias, n_head=n_head,
                         eps=eps)  # fmt: skip
    return x, y


_embedded_window_attention = torch.library.custom_op(
    "gptstack::embedded_window_attention", mutates_args=()
)(_embedded_window_attention_impl)


@_embedded_window_attention.register_fake
def _embedded_window_attention_fake(window, token, wte, wpe, weight, bias, ln_weight, ln_bias,
                                    n_head, eps):  # fmt: skip
    x = wte.new_empty(window.size(0), window.size(1), wte.size(1))
    return x, torch.empty_like(x)


def embedded_window_attention(
    window: Tensor,
    token: Tensor,
    wte: Tensor,
    wpe: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    *,
    ln_weight: Tensor,
    ln_bias: Tensor | None = None,
    n_head: int,
    eps: float = DEFAULT_EPS,
) -> tuple[Tensor, Tensor]:
    """The slide window's first block attention with its input embedded: returns (x, y) with
    x = window_embed(window, token, wte, wpe) (B, T, C) and y = window_attention(x, weight,
    bias, ln_weight=, ln_bias=, n_head=) (B, T, C). On CUDA where window_attention is one launch
    (bfloat16, T <= WINDOW_ATTENTION_MAX_T, head size 32 or 64, 16-byte aligned tables), the
    embedding is done in that launch too, the same bits as the two ops; otherwise those two ops.
    Arguments as the two ops take them. For generation: no autograd formula. Raises OpTypeError
    / OpInputError naming the argument.
    """
    op = "embedded_window_attention"
    window, token = window_embed_args(op, window, token, wte, wpe)
    _attention_args(op, "wte", wte, n_head, weight=weight, bias=bias, ln_weight=ln_weight,
                    ln_bias=ln_bias)  # fmt: skip
    args = (window, token, wte, wpe, weight, bias, ln_weight, ln_bias)
    impl = _embedded_window_attention_impl if direct(*args) else _embedded_window_attention
    return impl(*args, n_head, float(eps))


# decode_tail's weights, in this order (csrc/decode.h's DecodeTailTensor)
TAIL_TENSORS = (
    "proj_weight", "proj_bias", "ln2_weight", "ln2_bias", "fc_weight", "fc_bias",
    "mlp_proj_weight", "mlp_proj_bias", "lnf_weight", "lnf_bias", "head_weight",
)  # fmt: skip


def _decode_tail_impl(
    y: Tensor, x: Tensor, weights: list[Tensor | None], eps: float
) -> Tensor:  # fmt: skip
    wp, bp, l2w, l2b, wf, bf, wm, bm, lfw, lfb, wh = weights
    logits = torch.empty(y.size(0), wh.size(0), dtype=y.dtype, device=y.device)
    if y.is_cuda and _C.decode_tail(dl(logits), dl(y), dl(x), [dl(t) for t in weights], eps,
                                    stream_of(y)):  # fmt: skip
        return logits
    # no fused kernel for this call: the four decode_linear calls it stands for (the first
    # three are window_mlp's, the same bits whether that runs its kernel or them)
    x2 = window_mlp(y, x, wp, bp, wf, bf, wm, bm, ln_weight=l2w, ln_bias=l2b, eps=eps)
    return decode_linear(x2, wh, None, ln_weight=lfw, ln_bias=lfb, eps=eps)


_decode_tail = torch.library.custom_op("gptstack::decode_tail", mutates_args=())(_decode_tail_impl)


@_decode_tail.register_fake
def _decode_tail_fake(y, x, weights, eps):
    return y.new_empty(y.size(0), weights[-1].size(0))


def decode_tail(
    y: Tensor, x: Tensor, weights: Sequence[Tensor | None], *, eps: float = DEFAULT_EPS
) -> Tensor:
    """The end of a decode step for one row a sequence: the last block after its attention and
    the LM head. y, x (B, C): the last block's attention output and the residual stream;
    weights: TAIL_TENSORS (attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj, ln_f, lm_head; None for a
    missing bias, shaped as nn.Linear / nn.LayerNorm store them, mlp.c_fc 4C wide). Returns the
    logits (B, V):
    x1 = decode_linear(y, proj, residual=x); h = decode_linear(x1, fc, ln=ln2, gelu=True);
    x2 = decode_linear(h, mlp_proj, residual=x1); decode_linear(x2, head, ln=lnf). On CUDA
    (sm_90+) in bfloat16 at the widths C of TAIL_WIDTHS it is one launch (csrc/decode_tail.cuh),
    the four calls' bits; otherwise those calls. For generation: no autograd formula. Raises
    OpTypeError / OpInputError naming the argument.
    """
    op = "decode_tail"
    float_tensor(op, "y", y, min_dim=2)
    if y.dim() != 2:
        raise OpInputError(f"{op}: y must be (B, C), got shape {tuple(y.shape)}")
    weights = list(weights)
    if len(weights) != len(TAIL_TENSORS):
        raise OpInputError(f"{op}: weights must hold {len(TAIL_TENSORS)} tensors "
                           f"({', '.join(TAIL_TENSORS)}), got {len(weights)}")  # fmt: skip
    B, C = y.shape
    head = weights[-1]
    float_tensor(op, "head_weight", head, min_dim=2)
    V, N = head.size(0), 4 * C
    shapes = {"proj_weight": (C, C), "proj_bias": (C,), "ln2_weight": (C,), "ln2_bias": (C,),
              "fc_weight": (N, C), "fc_bias": (N,), "mlp_proj_weight": (C, N),
              "mlp_proj_bias": (C,), "lnf_weight": (C,), "lnf_bias": (C,),
              "head_weight": (V, C)}  # fmt: skip
    like(op, "y", y, "x", x, shape=(B, C))
    for name, t in zip(TAIL_TENSORS, weights, strict=True):
        if t is not None or not name.endswith("bias"):
            like(op, "y", y, name, t, shape=shapes[name])
    impl = _decode_tail_impl if direct(y, x, *weights) else _decode_tail
    return impl(y, x, weights, float(eps))


def _window_mlp_impl(
    y: Tensor,
    x: Tensor,
    proj_weight: Tensor,
    proj_bias: Tensor | None,
    ln_weight: Tensor,
    ln_bias: Tensor | None,
    fc_weight: Tensor,
    fc_bias: Tensor | None,
    mlp_proj_weight: Tensor,
    mlp_proj_bias: Tensor | None,
    eps: float,
) -> Tensor:
    out = torch.empty_like(x)
    if y.is_cuda and _C.window_mlp(
        dl(out), dl(y), dl(x), dl(proj_weight), dl(proj_bias), dl(ln_weight), dl(ln_bias),
        dl(fc_weight), dl(fc_bias), dl(mlp_proj_weight), dl(mlp_proj_bias), eps, stream_of(y),
    ):  # fmt: skip
        return out
    # no fused kernel for this call: the three decode_linear calls it stands for
    x1 = decode_linear(y, proj_weight, proj_bias, residual=x)
    h = decode_linear(x1, fc_weight, fc_bias, ln_weight=ln_weight, ln_bias=ln_bias, gelu=True,
                      eps=eps)  # fmt: skip
    return decode_linear(h, mlp_proj_weight, mlp_proj_bias, residual=x1)


_window_mlp = torch.library.custom_op("gptstack::window_mlp", mutates_args=())(_window_mlp_impl)


@_window_mlp.register_fake
def _window_mlp_fake(
    y, x, proj_weight, proj_bias, ln_weight, ln_bias, fc_weight, fc_bias, mlp_proj_weight,
    mlp_proj_bias, eps,
):  # fmt: skip
    return torch.empty_like(x)


def window_mlp(
    y: Tensor,
    x: Tensor,
    proj_weight: Tensor,
    proj_bias: Tensor | None,
    fc_weight: Tensor,
    fc_bias: Tensor | None,
    mlp_proj_weight: Tensor,
    mlp_proj_bias: Tensor | None = None,
    *,
    ln_weight: Tensor,
    ln_bias: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """The rest of a block after its attention, for the rows of a slide window:
    x1 = decode_linear(y, proj_weight, proj_bias, residual=x),
    h = decode_linear(x1, fc_weight, fc_bias, ln_weight=, ln_bias=, gelu=True) and
    out = decode_linear(h, mlp_proj_weight, mlp_proj_bias, residual=x1); returns out (R, C).

    y, x (R, C): the attention's output and the residual stream; proj_weight (C, C),
    proj_bias (C,): attn.c_proj; ln_weight / ln_bias (C,): ln_2; fc_weight (N, C),
    fc_bias (N,): mlp.c_fc; mlp_proj_weight (C, N), mlp_proj_bias (C,): mlp.c_proj. On CUDA
    (sm_90+) in bfloat16 at the widths C of WINDOW_MLP_WIDTHS, with N = 4C and at least
    MMA_MIN_ROWS rows, it is one launch (csrc/window_mlp.cuh), the three calls' bits; otherwise
    those three calls. For generation: no autograd formula. Raises OpTypeError / OpInputError
    naming the argument.
    """
    op = "window_mlp"
    float_tensor(op, "y", y, min_dim=2)
    if y.dim() != 2:
        raise OpInputError(f"{op}: y must be (R, C), got shape {tuple(y.shape)}")
    R, C = y.shape
    float_tensor(op, "fc_weight", fc_weight, min_dim=2)
    N = fc_weight.size(0)
    for name, t, shape in (
        ("x", x, (R, C)),
        ("proj_weight", proj_weight, (C, C)),
        ("proj_bias", proj_bias, (C,)),
        ("ln_weight", ln_weight, (C,)),
        ("ln_bias", ln_bias, (C,)),
        ("fc_weight", fc_weight, (N, C)),
        ("fc_bias", fc_bias, (N,)),
        ("mlp_proj_weight", mlp_proj_weight, (C, N)),
        ("mlp_proj_bias", mlp_proj_bias, (C,)),
    ):
        if t is not None or name in ("x", "proj_weight", "ln_weight", "mlp_proj_weight"):
            like(op, "y", y, name, t, shape=shape)
    args = (y, x, proj_weight, proj_bias, ln_weight, ln_bias, fc_weight, fc_bias,
            mlp_proj_weight, mlp_proj_bias)  # fmt: skip
    impl = _window_mlp_impl if direct(*args) else _window_mlp
    return impl(*args, float(eps))
