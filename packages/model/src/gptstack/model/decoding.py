"""Autoregressive generation: naive (the reference), KV cache, static KV cache, and the graph
decoder (graph_decoding.py: static cache, sampling on the GPU, many tokens per CUDA-graph replay).

    generate(model, idx, n, mode="naive" | "kv" | "static" | "graph", temperature=, top_k=,
             top_p=, seed=, window="slide" | "halve", vocab_limit=)

naive   recomputes the whole window (the last block_size tokens) every step: O(T) tokens of work
        per new token. It is the reference the other modes are tested against.
kv      prefills the window once, then feeds one token per step against a growing KVCache.
static  the same with a preallocated StaticKVCache and the position as a tensor, so the one-token
        decode step has fixed shapes; with cuda_graph=True (CUDA only) that step is captured once
        in a torch.cuda.CUDAGraph and replayed (gpt-fast pattern, docs/CONVENTIONS.md §3). On CPU
        the
        same static path runs eagerly.

graph   graph_decoding.GraphDecoder: the fastest on a GPU (the default of `gptstack sample`).

Past block_size our learned absolute positions make every cached row stale once the window
moves. Two window policies, the same in every mode:
slide   (default) the window is always the last block_size tokens: after it fills, each token
        re-runs a whole block_size window (naive's cost).
halve   the C engine's rule (FORMAT.md section 8): when the window is full, keep its last T/2
        tokens, re-run them at positions 0 .., continue from there; one half-window re-run every
        T/2 tokens. PyTorch then writes the same text as the chip past T.

vocab_limit: ids >= vocab_limit are never drawn (gpt2-124m pads 50257 ids to 50304 rows; the
padded rows have logits too, and an untrained model samples them).

All modes draw from the same sampling.py, so greedy (temperature=0) output is identical across
modes, and the same seed gives the same tokens in naive, kv and static (one generator per call);
the graph decoder draws from its own generator (same seed, same text, other draws).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from .errors import ModelError
from .gpt import GPT
from .graph_decoding import WINDOWS, GraphDecoder, window_length
from .graphs import capture
from .io import unwrap
from .kv_cache import KVCache, StaticKVCache
from .sampling import check_sampling, make_generator, sample

MODES = ("naive", "kv", "static", "graph")


class KVCacheDecoder:
    """Prefill + one-token decode against a growing KVCache (dynamic shapes, eager)."""

    mode = "kv"
    cuda_graph = False

    def __init__(self, model: nn.Module) -> None:
        self.model = _require_gpt(model, self.mode)
        self.cache = KVCache(self.model.config.n_layer)

    @torch.no_grad()
    def prefill(self, window: Tensor) -> Tensor:
        """Reset the cache, run window (B, T <= block_size) at positions [0, T); (B, V) logits."""
        self.cache.reset()
        logits, _ = self.model(window, last_only=True, kv_cache=self.cache, pos=0)
        return logits[:, -1]

    @torch.no_grad()
    def decode(self, token: Tensor, pos: int) -> Tensor:
        """Run token (B,) at position pos (== tokens cached); returns (B, V) logits."""
        logits, _ = self.model(token.view(-1, 1), last_only=True, kv_cache=self.cache, pos=pos)
        return logits[:, -1]


class StaticCacheDecoder:
    """Prefill + fixed-shape one-token decode against a preallocated StaticKVCache.

    Owns its buffers (cache, input token, position), the captured CUDA graph and the compiled
    step; reuse one decoder across generate() calls to pay capture/compilation once.
    batch_size must match the prompts'. cuda_graph=True needs the model on CUDA. compile=True
    runs the decode step through torch.compile(fullgraph=True) (inside the graph when both).
    """

    mode = "static"

    def __init__(
        self, model: nn.Module, batch_size: int, *, cuda_graph: bool = False, compile: bool = False
    ) -> None:
        self.model = _require_gpt(model, self.mode)
        cfg = self.model.config
        weight = self.model.wte.weight
        if cuda_graph and weight.device.type != "cuda":
            raise ModelError(
                f"cuda_graph=True needs the model on a CUDA device, but it is on "
                f"{weight.device}; move it with model.to('cuda') or pass cuda_graph=False"
            )
        self.cuda_graph = cuda_graph
        self.batch_size = batch_size
        self.cache = StaticKVCache(
            cfg.n_layer,
            batch_size,
            cfg.n_head,
            cfg.block_size,
            cfg.head_size,
            device=weight.device,
            dtype=weight.dtype,
        )
        # Static inputs of the decode step: overwritten in place before each call / replay.
        self._token = torch.zeros(batch_size, 1, dtype=torch.long, device=weight.device)
        self._pos = torch.zeros((), dtype=torch.long, device=weight.device)
        self._step: Callable[[], Tensor] = self._decode_step
        if compile:
            self._step = torch.compile(self._decode_step, fullgraph=True, dynamic=False)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._graph_logits: Tensor | None = None

    @torch.no_grad()
    def prefill(self, window: Tensor) -> Tensor:
        """Write window (B, T <= block_size) into the cache at positions [0, T); (B, V) logits."""
        logits, _ = self.model(window, last_only=True, kv_cache=self.cache, pos=0)
        return logits[:, -1]

    @torch.no_grad()
    def decode(self, token: Tensor, pos: int) -> Tensor:
        """Run token (B,) at position pos < block_size; returns (B, V) logits (a fresh tensor)."""
        if not 0 <= pos < self.cache.max_seq_len:
            raise ModelError(
                f"decode position {pos} is outside the static cache [0, {self.cache.max_seq_len}); "
                f"re-prefill the last block_size tokens instead"
            )
        self._token.copy_(token.view(self.batch_size, 1))
        self._pos.fill_(pos)
        if not self.cuda_graph:
            return self._step()
        if self._graph is None:
            self._capture()
        self._graph.replay()
        return self._graph_logits.clone()  # the next replay overwrites the graph's output

    def _decode_step(self) -> Tensor:
        logits, _ = self.model(self._token, last_only=True, kv_cache=self.cache, pos=self._pos)
        return logits[:, -1]  # (B, V)

    def _capture(self) -> None:
        # Warm-up and capture rerun the current step: they write the same k/v at the same
        # position, so the cache is unchanged by them.
        self._graph, self._graph_logits = capture(self._step, self._token.device)


def _require_gpt(model: nn.Module, mode: str) -> GPT:
    module = unwrap(model)
    if not isinstance(module, GPT):
        raise ModelError(
            f"mode {mode!r} needs a GPT (it caches attention keys/values); got "
            f"{type(module).__name__}: use mode='naive'"
        )
    return module


def _check_prompt(model: nn.Module, idx: Tensor, max_new_tokens: int) -> None:
    if not isinstance(idx, Tensor) or idx.dim() != 2 or idx.size(1) < 1:
        shape = tuple(idx.shape) if isinstance(idx, Tensor) else type(idx).__name__
        raise ModelError(f"prompt must be a (B, T) tensor of token ids with T >= 1, got {shape}")
    if idx.dtype != torch.long:
        raise ModelError(f"prompt dtype is {idx.dtype}; token ids must be torch.long (int64)")
    param = next(model.parameters())
    if idx.device != param.device:
        raise ModelError(
            f"prompt is on {idx.device} but the model is on {param.device}; "
            f"move the prompt with idx.to({str(param.device)!r})"
        )
    n = max_new_tokens
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ModelError(f"max_new_tokens is {max_new_tokens!r}: it must be an integer >= 0")


def stream(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    *,
    mode: str = "naive",
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    cuda_graph: bool = False,
    decoder: KVCacheDecoder | StaticCacheDecoder | GraphDecoder | None = None,
    window: str = "slide",
    vocab_limit: int | None = None,
) -> Iterator[Tensor]:
    """An iterator yielding each new token as a (B,) int64 tensor, as soon as it is sampled.

    idx: (B, T) int64 prompt on the model's device (T may exceed block_size: the window moves
    as `window` says). decoder: a KVCacheDecoder / StaticCacheDecoder / GraphDecoder to reuse
    (its mode must equal `mode`). vocab_limit: never draw ids >= vocab_limit.
    The model runs in eval mode, without autograd, while the iterator runs (restored afterwards).
    Arguments are checked here, before the first token: ModelError on a bad prompt, mode or
    sampling setting.
    """
    module = unwrap(model)
    _check_prompt(module, idx, max_new_tokens)
    check_sampling(temperature, top_k, top_p)
    if mode not in MODES:
        raise ModelError(f"generation mode {mode!r} is unknown; choose one of {list(MODES)}")
    if cuda_graph and mode != "static":
        raise ModelError(f"cuda_graph=True needs mode='static', got mode={mode!r}")
    if window not in WINDOWS:
        raise ModelError(f"window {window!r} is unknown; choose one of {list(WINDOWS)}")
    if vocab_limit is not None and not 1 <= vocab_limit <= module.config.vocab_size:
        raise ModelError(
            f"vocab_limit is {vocab_limit!r}: it must be in 1 .. "
            f"{module.config.vocab_size} (the model's vocab_size)"
        )
    if decoder is None:
        if mode == "kv":
            decoder = KVCacheDecoder(module)
        elif mode == "static":
            decoder = StaticCacheDecoder(module, idx.size(0), cuda_graph=cuda_graph)
        elif mode == "graph":
            decoder = GraphDecoder(module, idx.size(0))
    elif decoder.mode != mode:
        raise ModelError(
            f"decoder is a {type(decoder).__name__} (mode {decoder.mode!r}) but mode={mode!r}; "
            f"pass mode={decoder.mode!r}"
        )
    elif decoder.model is not module:
        raise ModelError("decoder was built for another model; build one for this model")
    elif cuda_graph and not decoder.cuda_graph:
        raise ModelError(
            "cuda_graph=True but the decoder passed in was built with cuda_graph=False; "
            "build it with StaticCacheDecoder(model, batch_size, cuda_graph=True)"
        )
    if mode == "graph":
        chunks = decoder.generate(
            idx,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            window=window,
            vocab_limit=vocab_limit,
        )
        return (col.to(idx.device) for chunk in chunks for col in chunk.unbind(1))
    generator = make_generator(seed, idx.device)

    def pick(logits: Tensor) -> Tensor:  # (B, V) -> (B,)
        if vocab_limit is not None:
            logits = logits[:, :vocab_limit]
        return sample(
            logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
        )

    return _run(module, decoder, idx, max_new_tokens, pick, window)


@torch.no_grad()  # on a generator function, torch applies no_grad around each resume only
def _run(
    module: nn.Module,
    decoder: KVCacheDecoder | StaticCacheDecoder | None,
    idx: Tensor,
    max_new_tokens: int,
    pick: Callable[[Tensor], Tensor],
    window: str,
) -> Iterator[Tensor]:
    was_training = module.training
    module.eval()  # no dropout while generating
    try:
        if decoder is None:
            yield from _stream_naive(module, idx, max_new_tokens, pick, window)
        else:
            yield from _stream_cached(decoder, module.block_size, idx, max_new_tokens, pick, window)
    finally:
        module.train(was_training)


def _next_window(window: Tensor, token: Tensor, block_size: int, policy: str) -> Tensor:
    """The window (B, <= T) after feeding token (B,): slide keeps the last T ids; halve, when the
    window is full, keeps its last T/2 and appends (FORMAT.md section 8)."""
    if policy == "halve" and window.size(1) == block_size:
        window = window[:, -(block_size // 2) :]
    return torch.cat([window, token[:, None]], dim=1)[:, -block_size:]


def _stream_naive(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    pick: Callable[[Tensor], Tensor],
    policy: str,
) -> Iterator[Tensor]:
    """The reference: run the whole window for every new token."""
    T = model.block_size
    window = idx[:, -window_length(idx.size(1), T, policy) :]  # (B, <= block_size)
    for _ in range(max_new_tokens):
        logits, _ = model(window, last_only=True)  # (B, 1, V)
        token = pick(logits[:, -1])  # (B,)
        yield token
        window = _next_window(window, token, T, policy)


def _stream_cached(
    decoder: KVCacheDecoder | StaticCacheDecoder,
    block_size: int,
    idx: Tensor,
    max_new_tokens: int,
    pick: Callable[[Tensor], Tensor],
    policy: str,
) -> Iterator[Tensor]:
    """Prefill once, then decode one token per step while the window has room; once it is
    full, re-prefill the window as the policy moves it (see the module docstring)."""
    window = idx[:, -window_length(idx.size(1), block_size, policy) :]  # (B, <= block_size)
    if max_new_tokens == 0:
        return
    logits = decoder.prefill(window)  # (B, V)
    for step in range(max_new_tokens):
        token = pick(logits)  # (B,)
        yield token
        if step == max_new_tokens - 1:
            return
        full = window.size(1) == block_size
        window = _next_window(window, token, block_size, policy)
        if not full:
            logits = decoder.decode(token, window.size(1) - 1)  # the new token's position
        else:
            logits = decoder.prefill(window)  # the window moved: every cached row is stale


def generate(model: nn.Module, idx: Tensor, max_new_tokens: int, **options: Any) -> Tensor:
    """Prompt (B, T) int64 -> (B, T + max_new_tokens) int64, prompt first.

    `options` are `stream`'s keyword arguments (mode, sampling settings, seed, cuda_graph,
    decoder), passed through and checked there; ModelError as `stream` raises it.
    """
    tokens = list(stream(model, idx, max_new_tokens, **options))
    if not tokens:
        return idx.clone()
    return torch.cat([idx, torch.stack(tokens, dim=1)], dim=1)
