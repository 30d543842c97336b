"""What goes into and comes out of a graph-decoder step: `torch.ops.gptstack.decode_embed`,
`window_embed` and `decode_advance`.

    x = decode_embed(token, pos, wte, wpe)          # (B, C) = wte[token] + wpe[pos]
    x = window_embed(window, token, wte, wpe)       # (B, T, C): cat(window[:, 1:], token)
    decode_advance(new, DecoderState(out, i, token, window, pos, slide=False))  # once drawn

One launch each where the decoder ran two index_selects and an add, then an index_copy, two
copies and `pos += 1` (formulas: csrc/decode_io.h; CPU reference csrc/decode_io.cpp). The ids and
the position are int64 tensors read and written on the device, so a CUDA graph replays a step
with the current ones. For generation only: no autograd formula.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ._checks import direct, float_tensor, like
from ._ext import _C, dl, stream_of
from .errors import OpInputError, OpTypeError

# decode_advance(slide=True) on CUDA holds a window row in shared memory: at most this many ids
MAX_SLIDE_T: int = _C.decode_io_max_t


def _decode_embed_impl(token: Tensor, pos: Tensor, wte: Tensor, wpe: Tensor) -> Tensor:
    x = torch.empty(token.size(0), wte.size(1), dtype=wte.dtype, device=wte.device)
    _C.decode_embed(dl(x), dl(token), dl(pos), dl(wte), dl(wpe), stream_of(wte))
    return x


_decode_embed = torch.library.custom_op("gptstack::decode_embed", mutates_args=())(
    _decode_embed_impl
)


@_decode_embed.register_fake
def _decode_embed_fake(token, pos, wte, wpe):
    return torch.empty(token.size(0), wte.size(1), dtype=wte.dtype, device=wte.device)


def _window_embed_impl(window: Tensor, token: Tensor, wte: Tensor, wpe: Tensor) -> Tensor:
    B, T = window.shape
    x = torch.empty(B, T, wte.size(1), dtype=wte.dtype, device=wte.device)
    _C.window_embed(dl(x), dl(window), dl(token), dl(wte), dl(wpe), stream_of(wte))
    return x


_window_embed = torch.library.custom_op("gptstack::window_embed", mutates_args=())(
    _window_embed_impl
)


@_window_embed.register_fake
def _window_embed_fake(window, token, wte, wpe):
    B, T = window.shape
    return torch.empty(B, T, wte.size(1), dtype=wte.dtype, device=wte.device)


def _decode_advance_impl(
    new: Tensor, out: Tensor, column: int, token: Tensor, window: Tensor, pos: Tensor, slide: bool
) -> None:
    _C.decode_advance(
        dl(new), dl(out), column, dl(token), dl(window), dl(pos), slide, stream_of(window)
    )


_decode_advance = torch.library.custom_op(
    "gptstack::decode_advance", mutates_args=("out", "token", "window", "pos")
)(_decode_advance_impl)


@_decode_advance.register_fake
def _decode_advance_fake(new, out, column, token, window, pos, slide):
    return None


def _ids(
    op: str, name: str, t: object, device: torch.device, count: int, contiguous: bool = True
) -> Tensor:
    """t is an int64 tensor of `count` elements on `device` (contiguous: written in place)."""
    if not isinstance(t, Tensor) or t.dtype != torch.int64:
        raise OpTypeError(f"{op}: {name} must be an int64 tensor, got {t!r}")
    if t.device != device:
        raise OpInputError(f"{op}: {name} is on {t.device}, the op's other tensors on {device}")
    if t.numel() != count or (contiguous and not t.is_contiguous()):
        what = "a contiguous tensor" if contiguous else "a tensor"
        raise OpInputError(
            f"{op}: {name} must be {what} of {count} element(s), got shape {tuple(t.shape)}"
        )
    return t


def _tokens(
    op: str, token: object, device: torch.device, rows: int | None = None, contiguous: bool = True
) -> int:
    """token is an int64 (B,) or (B, 1) tensor on `device` (with `rows` rows): its B."""
    if not isinstance(token, Tensor) or token.dtype != torch.int64:
        raise OpTypeError(f"{op}: token must be an int64 tensor, got {token!r}")
    if token.dim() not in (1, 2) or (token.dim() == 2 and token.size(1) != 1):
        raise OpInputError(f"{op}: token must be (B,) or (B, 1), got shape {tuple(token.shape)}")
    B = token.size(0)
    if rows is not None and B != rows:
        raise OpInputError(f"{op}: token has {B} rows but the window {rows}")
    _ids(op, "token", token, device, B, contiguous)
    return B


def _tables(op: str, wte: Tensor, wpe: Tensor) -> None:
    float_tensor(op, "wte", wte, min_dim=2)
    if wte.dim() != 2:
        raise OpInputError(f"{op}: wte must be (vocab, C), got shape {tuple(wte.shape)}")
    if not isinstance(wpe, Tensor) or wpe.dim() != 2:
        raise OpInputError(f"{op}: wpe must be (positions, C), got {getattr(wpe, 'shape', wpe)}")
    like(op, "wte", wte, "wpe", wpe, shape=(wpe.size(0), wte.size(1)))


def _window(op: str, window: object, device: torch.device, contiguous: bool = True) -> Tensor:
    if not isinstance(window, Tensor) or window.dtype != torch.int64 or window.dim() != 2:
        raise OpTypeError(f"{op}: window must be an int64 (B, T) tensor, got {window!r}")
    return _ids(op, "window", window, device, window.numel(), contiguous)


def decode_embed(token: Tensor, pos: Tensor, wte: Tensor, wpe: Tensor) -> Tensor:
    """x (B, C) = wte[token] + wpe[pos]: the token embedding of each row plus the position's.

    token: int64 (B,) or (B, 1); pos: int64 tensor of one element (read on the device: a CUDA
    graph replays with the current position); wte (vocab, C), wpe (positions, C) of one float
    dtype (float32 or bfloat16; float64 on the CPU). Added in float, rounded once. An id or
    position out of range gives a row of NaN. Raises OpTypeError / OpInputError.
    """
    op = "decode_embed"
    _tables(op, wte, wpe)
    _tokens(op, token, wte.device, contiguous=False)
    _ids(op, "pos", pos, wte.device, 1, contiguous=False)
    token, pos = token.contiguous(), pos.contiguous()  # a column of a (B, T) prompt is strided
    fn = _decode_embed_impl if direct(token, pos, wte, wpe) else _decode_embed
    return fn(token, pos, wte, wpe)


def window_embed(window: Tensor, token: Tensor, wte: Tensor, wpe: Tensor) -> Tensor:
    """x (B, T, C): the embedding of ids = cat(window[:, 1:], token) at positions 0..T-1, the
    slide window's input once token is fed, without making ids.

    window: int64 (B, T), T <= wpe's positions; token: int64 (B,) or (B, 1); wte, wpe as
    decode_embed. An id out of range gives a row of NaN. Raises OpTypeError / OpInputError.
    """
    window, token = window_embed_args("window_embed", window, token, wte, wpe)
    fn = _window_embed_impl if direct(window, token, wte, wpe) else _window_embed
    return fn(window, token, wte, wpe)


def window_embed_args(
    op: str, window: Tensor, token: Tensor, wte: Tensor, wpe: Tensor
) -> tuple[Tensor, Tensor]:
    """window_embed's arguments checked (OpTypeError / OpInputError naming op and the argument):
    window and token, contiguous."""
    _tables(op, wte, wpe)
    window = _window(op, window, wte.device, contiguous=False).contiguous()
    B, T = window.shape
    if T > wpe.size(0):
        raise OpInputError(f"{op}: the window holds {T} ids but wpe only {wpe.size(0)} positions")
    _tokens(op, token, wte.device, rows=B, contiguous=False)
    return window, token.contiguous()


class DecoderState(NamedTuple):
    """The graph decoder's state that decode_advance (or sample_tokens with advance=) updates
    once new tokens are drawn: the new tokens go to out[:, column] and become token; slide=False
    (a cached step): window[:, pos] = token, then pos += 1; slide=True (the window was full):
    window = cat(window[:, 1:], token). All int64 on one device, contiguous: out (B, n), token
    (B,) or (B, 1), window (B, T), pos of one element (read on the device; a pos outside [0, T)
    writes no window id)."""

    out: Tensor
    column: int
    token: Tensor
    window: Tensor
    pos: Tensor
    slide: bool


def check_state(op: str, state: object, rows: int | None = None) -> DecoderState:
    """state is a valid DecoderState (of `rows` rows); OpTypeError / OpInputError if not."""
    if not isinstance(state, DecoderState):
        raise OpTypeError(f"{op}: the decoder's state must be a DecoderState, got {state!r}")
    out, column, token, window, pos, slide = state
    if not isinstance(window, Tensor):
        raise OpTypeError(f"{op}: window must be an int64 (B, T) tensor, got {window!r}")
    window = _window(op, window, window.device)
    B, T = window.shape
    device = window.device
    if rows is not None and B != rows:
        raise OpInputError(f"{op}: the window has {B} rows, the logits {rows}")
    if device.type == "cuda" and slide and T > MAX_SLIDE_T:
        raise OpInputError(f"{op}: a window of {T} ids is above the CUDA kernel's {MAX_SLIDE_T}")
    if not isinstance(out, Tensor) or out.dtype != torch.int64 or out.dim() != 2:
        raise OpTypeError(f"{op}: out must be an int64 (B, n) tensor, got {out!r}")
    _ids(op, "out", out, device, out.numel())
    if out.size(0) != B:
        raise OpInputError(f"{op}: out has {out.size(0)} rows but the window {B}")
    if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < out.size(1):
        n = out.size(1)
        raise OpInputError(f"{op}: column is {column!r}; it must be an integer in [0, {n})")
    _tokens(op, token, device, rows=B)
    _ids(op, "pos", pos, device, 1)
    if not isinstance(slide, bool):
        raise OpTypeError(f"{op}: slide must be True or False, got {slide!r}")
    return state


def decode_advance(new: Tensor, state: DecoderState) -> None:
    """The graph decoder's state once new (B,) int64 tokens are drawn, updated in place (see
    DecoderState). Raises OpTypeError / OpInputError."""
    op = "decode_advance"
    out, column, token, window, pos, slide = check_state(op, state)
    _ids(op, "new", new, window.device, window.size(0))
    fn = _decode_advance_impl if direct(new, out, token, window, pos) else _decode_advance
    fn(new, out, column, token, window, pos, slide)
