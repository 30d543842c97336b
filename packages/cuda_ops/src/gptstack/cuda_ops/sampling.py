"""Next-token sampling in one launch: `torch.ops.gptstack.sample_tokens`.

    state = sampler_state(seed, device)           # int64 [seed, draw, 0] on the device
    token = sample_tokens(logits, state, temperature=0.8, top_k=40)   # (R,) int64; draw += 1

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
    if not isinstance(state, Tensor) or state.dtype != torch.int64 or tuple(state.shape) != (3,):
        raise OpTypeError(f"{op}: state must be the int64 (3,) tensor of sampler_state()")
    if state.device != logits.device:
        raise OpInputError(f"{op}: state is on {state.device} but logits on {logits.device}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise OpTypeError(f"{op}: temperature must be a number, got {temperature!r}")
    if not 0.0 < temperature < float("inf"):
        raise OpInputError(f"{op}: temperature is {temperature}; it must be > 0 (greedy: argmax)")
    V = logits.size(1)
    for name, value in (("top_k", top_k), ("vocab_limit", vocab_limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise OpTypeError(f"{op}: {name} must be an integer or None, got {value!r}")
    if top_k is not None and top_k < 1:
        raise OpInputError(f"{op}: top_k is {top_k}; it must be >= 1, or None for no limit")
    if vocab_limit is not None and not 1 <= vocab_limit <= V:
        raise OpInputError(f"{op}: vocab_limit is {vocab_limit}; it must be in [1, {V}]")
    args = (logits, state, float(temperature), top_k or 0, vocab_limit or V)
    if advance is None:
        return (_sample_tokens_impl if direct(logits, state) else _sample_tokens)(*args)
    out, column, token, window, pos, slide = check_state(op, advance, rows=logits.size(0))
    if window.device != logits.device:
        where = f"the decoder's state is on {window.device}, logits on {logits.device}"
        raise OpInputError(f"{op}: {where}")
    plain = direct(logits, state, out, token, window, pos)
    fn = _sample_and_advance_impl if plain else _sample_and_advance
    return fn(*args, out, column, token, window, pos, slide)
