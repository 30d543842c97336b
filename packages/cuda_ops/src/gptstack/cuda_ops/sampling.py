"""Next-token sampling in one launch: `torch.ops.gptstack.sample_tokens`, and `head_sample`.

    state = sampler_state(seed, device)           # int64 [seed, draw, 0] on the device
    token = sample_tokens(logits, state, temperature=0.8, top_k=40)   # (R,) int64; draw += 1
    token, logits = head_sample(x, lm_head_w, state, ln_weight=ln_f_w, temperature=0.8)

Temperature, top-k and the exponential race of the model's sampling.py, on a counter-based
Philox stream (csrc/sampling.h has the formulas and the stream), so the draw of every step is a
function of (seed, draw count) held in a device tensor: nothing on the host, and a CUDA graph
replays a new draw each time. One launch instead of ~10 (~25 us a token on the H200). No top-p
here (it needs a sort; the model's sampling.py does it); greedy decoding is an argmax.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import direct, float_tensor
from ._ext import _C, dl, stream_of, threads
from .decode import DEFAULT_EPS, check_linear
from .decode_io import DecoderState, check_state
from .errors import OpInputError, OpTypeError


def sampler_state(seed: int, device: torch.device | str = "cpu") -> Tensor:
    """The int64 [seed, draw 0, ticket 0] tensor sample_tokens reads and advances."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise OpInputError(f"sampler_state: seed is {seed!r}; use an integer in [0, 2**63)")
    return torch.tensor([seed, 0, 0], dtype=torch.int64, device=device)


def _sample_tokens_impl(
    logits: Tensor, state: Tensor, temperature: float, top_k: int, vocab_limit: int
) -> Tensor:
    tokens = torch.empty(logits.size(0), dtype=torch.int64, device=logits.device)
    _C.sample_tokens(
        dl(tokens), dl(logits), dl(state), temperature, top_k, vocab_limit, stream_of(logits),
        threads(),
    )  # fmt: skip
    return tokens


def _sample_and_advance_impl(
    logits: Tensor,
    state: Tensor,
    temperature: float,
    top_k: int,
    vocab_limit: int,
    out: Tensor,
    column: int,
    token: Tensor,
    window: Tensor,
    pos: Tensor,
    slide: bool,
) -> Tensor:
    tokens = torch.empty(logits.size(0), dtype=torch.int64, device=logits.device)
    _C.sample_tokens(
        dl(tokens), dl(logits), dl(state), temperature, top_k, vocab_limit, stream_of(logits),
        threads(), out=dl(out), column=column, token=dl(token), window=dl(window), pos=dl(pos),
        slide=slide,
    )  # fmt: skip
    return tokens


_sample_and_advance = torch.library.custom_op(
    "gptstack::sample_and_advance", mutates_args=("state", "out", "token", "window", "pos")
)(_sample_and_advance_impl)


@_sample_and_advance.register_fake
def _sample_and_advance_fake(logits, state, temperature, top_k, vocab_limit, *_decoder):
    return torch.empty(logits.size(0), dtype=torch.int64, device=logits.device)


_sample_tokens = torch.library.custom_op("gptstack::sample_tokens", mutates_args=("state",))(
    _sample_tokens_impl
)


@_sample_tokens.register_fake
def _sample_tokens_fake(logits, state, temperature, top_k, vocab_limit):
    return torch.empty(logits.size(0), dtype=torch.int64, device=logits.device)


def _sampling_args(
    op: str, logits_shape, device, state, temperature, top_k, vocab_limit
) -> tuple[float, int, int]:
    """sample_tokens' checks of everything but the logits (head_sample's too): (temperature,
    top_k or 0, vocab_limit or V) for the extension, or OpTypeError / OpInputError."""
    if not isinstance(state, Tensor) or state.dtype != torch.int64 or tuple(state.shape) != (3,):
        raise OpTypeError(f"{op}: state must be the int64 (3,) tensor of sampler_state()")
    if state.device != device:
        raise OpInputError(f"{op}: state is on {state.device} but logits on {device}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise OpTypeError(f"{op}: temperature must be a number, got {temperature!r}")
    if not 0.0 < temperature < float("inf"):
        raise OpInputError(f"{op}: temperature is {temperature}; it must be > 0 (greedy: argmax)")
    V = logits_shape[1]
    for name, value in (("top_k", top_k), ("vocab_limit", vocab_limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise OpTypeError(f"{op}: {name} must be an integer or None, got {value!r}")
    if top_k is not None and top_k < 1:
        raise OpInputError(f"{op}: top_k is {top_k}; it must be >= 1, or None for no limit")
    if vocab_limit is not None and not 1 <= vocab_limit <= V:
        raise OpInputError(f"{op}: vocab_limit is {vocab_limit}; it must be in [1, {V}]")
    return float(temperature), top_k or 0, vocab_limit or V


def _decoder_state(op: str, advance: DecoderState, rows: int, device) -> tuple:
    """The checked tensors and settings of the decoder's state (decode_io.check_state)."""
    state = check_state(op, advance, rows=rows)
    window = state[3]
    if window.device != device:
        where = f"the decoder's state is on {window.device}, logits on {device}"
        raise OpInputError(f"{op}: {where}")
    return state


def sample_tokens(
    logits: Tensor,
    state: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    vocab_limit: int | None = None,
    advance: DecoderState | None = None,
) -> Tensor:
    """One token per row of logits (R, V): (R,) int64 on logits' device.

    temperature > 0 (greedy is an argmax); top_k: keep the k largest (ties kept), None for all;
    vocab_limit: sample only ids < vocab_limit (a padded vocabulary's extra rows), None for V.
    state: from sampler_state(), on logits' device; its draw count advances by one per call.
    advance: the graph decoder's state, updated with the tokens as decode_advance does, in the
    same launch on CUDA (its last block to finish).
    Raises OpTypeError / OpInputError naming the argument.
    """
    op = "sample_tokens"
    float_tensor(op, "logits", logits, min_dim=2)
    if logits.dim() != 2:
        raise OpInputError(f"{op}: logits must be (rows, vocab), got shape {tuple(logits.shape)}")
    device = logits.device
    settings = _sampling_args(op, logits.shape, device, state, temperature, top_k, vocab_limit)
    args = (logits, state, *settings)
    if advance is None:
        return (_sample_tokens_impl if direct(logits, state) else _sample_tokens)(*args)
    out, column, token, window, pos, slide = _decoder_state(
        op, advance, logits.size(0), logits.device
    )
    plain = direct(logits, state, out, token, window, pos)
    fn = _sample_and_advance_impl if plain else _sample_and_advance
    return fn(*args, out, column, token, window, pos, slide)


# --- the LM head and the sampler in one launch ----------------------------------------------


def _head_sample_impl(
    x: Tensor,
    weight: Tensor,
    ln_weight: Tensor | None,
    ln_bias: Tensor | None,
    eps: float,
    state: Tensor,
    temperature: float,
    top_k: int,
    vocab_limit: int,
) -> tuple[Tensor, Tensor]:
    tokens, logits = _head_sample_outputs(x, weight)
    _C.head_sample(
        dl(tokens), dl(logits), dl(x), dl(weight), dl(ln_weight), dl(ln_bias), eps, dl(state),
        temperature, top_k, vocab_limit, stream_of(x), threads(),
    )  # fmt: skip
    return tokens, logits


def _head_sample_and_advance_impl(
    x: Tensor,
    weight: Tensor,
    ln_weight: Tensor | None,
    ln_bias: Tensor | None,
    eps: float,
    state: Tensor,
    temperature: float,
    top_k: int,
    vocab_limit: int,
    out: Tensor,
    column: int,
    token: Tensor,
    window: Tensor,
    pos: Tensor,
    slide: bool,
) -> tuple[Tensor, Tensor]:
    tokens, logits = _head_sample_outputs(x, weight)
    _C.head_sample(
        dl(tokens), dl(logits), dl(x), dl(weight), dl(ln_weight), dl(ln_bias), eps, dl(state),
        temperature, top_k, vocab_limit, stream_of(x), threads(), out=dl(out), column=column,
        token=dl(token), window=dl(window), pos=dl(pos), slide=slide,
    )  # fmt: skip
    return tokens, logits


def _head_sample_outputs(x: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """Empty (tokens (R,) int64, logits (R, N)): the ops' outputs, and their fakes'."""
    tokens = torch.empty(x.size(0), dtype=torch.int64, device=x.device)
    return tokens, torch.empty(x.size(0), weight.size(0), dtype=x.dtype, device=x.device)


_head_sample = torch.library.custom_op("gptstack::head_sample", mutates_args=("state",))(
    _head_sample_impl
)
_head_sample_and_advance = torch.library.custom_op(
    "gptstack::head_sample_and_advance", mutates_args=("state", "out", "token", "window", "pos")
)(_head_sample_and_advance_impl)


@_head_sample.register_fake
def _head_sample_fake(x, weight, *_rest):
    return _head_sample_outputs(x, weight)


@_head_sample_and_advance.register_fake
def _head_sample_and_advance_fake(x, weight, *_rest):
    return _head_sample_outputs(x, weight)


def head_sample(
    x: Tensor,
    weight: Tensor,
    state: Tensor,
    *,
    ln_weight: Tensor | None = None,
    ln_bias: Tensor | None = None,
    eps: float = DEFAULT_EPS,
    temperature: float = 1.0,
    top_k: int | None = None,
    vocab_limit: int | None = None,
    advance: DecoderState | None = None,
) -> tuple[Tensor, Tensor]:
    """The LM head and the next token at once: (tokens (R,), logits (R, N)) where

        logits = decode_linear(x, weight, ln_weight=ln_weight, ln_bias=ln_bias, eps=eps)
        tokens = sample_tokens(logits, state, temperature=..., top_k=..., vocab_limit=...,
                               advance=advance)

    bit for bit, in one launch on CUDA (the head's blocks write the logits; the last to finish
    draws the tokens and updates `advance`) where the two ops are two. x (R, K), weight (N, K)
    as nn.Linear stores it (no bias), the rest as in decode_linear and sample_tokens.
    Raises OpTypeError / OpInputError naming the argument.
    """
    op = "head_sample"
    check_linear(op, x, weight, ln_weight=ln_weight, ln_bias=ln_bias)
    logits_shape = (x.size(0), weight.size(0))
    settings = _sampling_args(op, logits_shape, x.device, state, temperature, top_k, vocab_limit)
    args = (x, weight, ln_weight, ln_bias, float(eps), state, *settings)
    if advance is None:
        plain = direct(x, weight, ln_weight, ln_bias, state)
        return (_head_sample_impl if plain else _head_sample)(*args)
    out, column, token, window, pos, slide = _decoder_state(op, advance, x.size(0), x.device)
    plain = direct(x, weight, ln_weight, ln_bias, state, out, token, window, pos)
    fn = _head_sample_and_advance_impl if plain else _head_sample_and_advance
    return fn(*args, out, column, token, window, pos, slide)
