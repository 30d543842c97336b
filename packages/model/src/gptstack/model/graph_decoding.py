"""The fast decoder: static KV cache, sampling on the device, many tokens per CUDA-graph replay.

    decoder = GraphDecoder(model, batch_size=1)
    for chunk in decoder.generate(idx, 500, temperature=0.8, top_k=40, seed=1):
        ...                                   # chunk: (B, k) int64 on the CPU, k <= decoder.chunk

Why it is fast (measured against the other modes in `gptstack bench generate`): a batch-1 decode
step of a small model is a few dozen tiny kernels, so its cost is launches and host round trips,
not arithmetic. Here the decode step *and* the sampling run on the GPU, `chunk` steps are captured
back to back in one CUDA graph, and the host never waits for a token: after each replay the
chunk's ids are copied into a pinned host buffer with an event, and the host reads the previous
chunk while the GPU computes the next one (no synchronisation per token).

Exactness: each step computes what `decoding.stream(mode="static")` computes (same forward on the
same StaticKVCache, same sampling.py), so greedy output equals the naive reference's (tests). On
CUDA the one-token forward and the slide window's forward run through gptstack.cuda_ops' fused
kernels when they are built (fused_step.py: the same functions, computed in float32 with one
rounding per op, so bf16 logits can differ from PyTorch's in the last bit; `fused=False` is
PyTorch's modules), and so does sampling with a temperature and no top-p: gptstack.cuda_ops'
sample_tokens draws each token in one launch, from a Philox stream keyed by the seed and a draw
counter on the device, instead of sampling.py's ~10 kernels. The random draws come from the
decoder's own generator or stream, seeded per call, so the same seed gives the same text; they
differ from the other modes' draws (another generator, another order).

Past block_size the window policy decides, as in decoding.py: "slide" (every later token re-runs
the last block_size tokens, naive's rule) or "halve" (the C engine's rule, FORMAT.md section 8:
when the window is full, keep its last T/2 ids, re-run them at positions 0.., continue). Both are
fixed-shape steps, so they are captured too.

On a CPU (or cuda_graph=False) the same steps run eagerly: this is also how the logic is tested
without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .config import native_ops
from .errors import ModelError
from .graphs import capture, run_on_side_stream
from .io import unwrap
from .kv_cache import StaticKVCache
from .sampling import check_sampling, make_generator, sample

if TYPE_CHECKING:  # the model package installs without gptstack.cuda_ops
    from gptstack.cuda_ops import DecoderState

WINDOWS = ("slide", "halve")
# Decode steps per graph replay: long enough that launch and host costs vanish, short enough that
# tokens stream to the terminal smoothly (32 tokens of a 10k tok/s decoder: every 3 ms).
DEFAULT_CHUNK = 32


class Pick:
    """A generation's token drawing: pick(logits) -> (B,) ids; with `fused` (cuda_ops'
    sampler), pick(logits, state) also updates the decoder's state (sample_tokens' advance=)."""

    def __init__(self, draw: Callable[..., Tensor], fused: bool) -> None:
        self.draw, self.fused = draw, fused

    def __call__(self, logits: Tensor, state=None) -> Tensor:
        return self.draw(logits, state)


def window_length(n_tokens: int, block_size: int, window: str) -> int:
    """How many of the last ids are in the window after feeding n_tokens ids one by one.

    "slide" keeps the last block_size ids. "halve" follows the C engine: feeding at position T
    first re-feeds the window's last T/2 ids at positions 0 .. T/2-1 (FORMAT.md section 8).
    """
    if window == "slide" or n_tokens <= block_size:
        return min(n_tokens, block_size)
    pos = block_size
    for _ in range(n_tokens - block_size):
        if pos == block_size:
            pos = block_size // 2
        pos += 1
    return pos


class GraphDecoder:
    """Static-cache decoder that runs `chunk` decode steps (forward + sampling) per CUDA-graph
    replay. Reuse one decoder across calls: graphs are captured once per sampling setting.

    model: a GPT (or a compiled/DDP wrapper of one). batch_size: the prompts' batch.
    cuda_graph: None = on when the model is on CUDA. fused: the one-token forward and the slide
    window's forward through gptstack.cuda_ops' fused kernels (fused_step.py); None = on
    when the model is on CUDA and the kernels can run it, True = required (ModelError naming
    why not), False = PyTorch's modules. compile: run the one-token and the window forwards
    through torch.compile(fullgraph=True) inside the graphs (fewer kernels; costs compile time).
    fused_sampling: with the fused step, draw tokens with gptstack.cuda_ops.sample_tokens where
    the setting allows (`samples_fused`); False = sampling.py's PyTorch ops.
    """

    mode = "graph"

    def __init__(
        self,
        model: nn.Module,
        batch_size: int,
        *,
        chunk: int = DEFAULT_CHUNK,
        cuda_graph: bool | None = None,
        fused: bool | None = None,
        compile: bool = False,
        fused_sampling: bool = True,
    ) -> None:
        from . import fused_step
        from .fused_step import FusedDecodeStep, unsupported_reason
        from .gpt import GPT

        module = unwrap(model)
        if not isinstance(module, GPT):
            raise ModelError(f"the graph decoder needs a GPT, got {type(module).__name__}")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ModelError(f"chunk is {chunk!r}: it must be an integer >= 1")
        weight = module.wte.weight
        device = weight.device
        if cuda_graph is None:
            cuda_graph = device.type == "cuda"
        if cuda_graph and device.type != "cuda":
            raise ModelError(f"cuda_graph=True needs the model on a CUDA device, not {device}")
        cfg = module.config
        self.model, self.device = module, device
        self.batch_size, self.chunk, self.cuda_graph = batch_size, chunk, cuda_graph
        self.block_size = cfg.block_size
        self.cache = StaticKVCache(
            cfg.n_layer,
            batch_size,
            cfg.n_head,
            cfg.block_size,
            cfg.head_size,
            device=device,
            dtype=weight.dtype,
        )
        # The decoder's state lives on the device, so captured steps read and advance it:
        self.window = torch.zeros(batch_size, cfg.block_size, dtype=torch.long, device=device)
        self.token = torch.zeros(batch_size, 1, dtype=torch.long, device=device)  # to feed next
        self.pos = torch.zeros((), dtype=torch.long, device=device)  # where it is fed
        self.out = torch.zeros(batch_size, chunk, dtype=torch.long, device=device)
        self.generator = make_generator(0, device)
        if fused is None:
            fused = device.type == "cuda" and unsupported_reason(module, device) is None
        self.fused = bool(fused)
        self.fused_sampling = self.fused and fused_sampling
        # the fused sampler's [seed, draw, ticket] (gptstack.cuda_ops.sampler_state)
        self.sampler = torch.zeros(3, dtype=torch.long, device=device)
        self._logits_one: Callable[[], Tensor] = self._forward_one
        self._logits_window: Callable[[], Tensor] = self._forward_window
        self.step: FusedDecodeStep | None = None
        if self.fused:
            step = self.step = FusedDecodeStep(module, self.cache)  # ModelError if it cannot run
            self._logits_one = lambda: step(self.token, self.pos)
            self._logits_window = lambda: step.slide(self.window, self.token)
        # with io_kernels, the state after a token updated by the fused sampler's last block
        # where it draws the tokens (fused_step.ADVANCE_IN_SAMPLER), else by decode_advance
        self.advance_in_sampler = fused_step.ADVANCE_IN_SAMPLER
        if compile:
            self._logits_one = torch.compile(self._logits_one, fullgraph=True, dynamic=False)
            self._logits_window = torch.compile(self._logits_window, fullgraph=True, dynamic=False)
        self._graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self._pinned: list[Tensor] = []

    @property
    def io_kernels(self) -> bool:
        """Whether the fed ids' embedding and the state after each token go through cuda_ops'
        kernels (the fused step's io_kernels, fused_step.IO_KERNELS)."""
        return self.step is not None and self.step.io_kernels

    def samples_fused(self, temperature: float, top_p: float | None) -> bool:
        """Whether tokens are drawn by cuda_ops.sample_tokens for this setting (it has no top-p;
        greedy is an argmax either way)."""
        return self.fused_sampling and temperature > 0 and (top_p is None or top_p == 1.0)

    # --- the steps (eager, or captured) ----------------------------------------------------

    def _forward_one(self) -> Tensor:
        logits, _ = self.model(self.token, last_only=True, kv_cache=self.cache, pos=self.pos)
        return logits[:, -1]  # (B, V)

    def _forward_window(self) -> Tensor:
        """The window is full: the last block_size ids once token is fed (naive's rule)."""
        ids = torch.cat([self.window[:, 1:], self.token], dim=1)  # (B, T)
        logits, _ = self.model(ids, last_only=True)
        return logits[:, -1]  # (B, V)

    def _decode_steps(self, n: int, pick: Pick) -> None:
        """n tokens at positions pos, pos+1, ... (pos + n <= block_size) into out[:, :n]."""
        for i in range(n):
            self._take(pick, self._logits_one(), i, slide=False)

    def _slide_steps(self, n: int, pick: Pick) -> None:
        """The window is full: each token re-runs the last block_size ids (naive's rule)."""
        for i in range(n):
            self._take(pick, self._logits_window(), i, slide=True)

    def _take(self, pick: Pick, logits: Tensor, i: int, *, slide: bool) -> None:
        """The next token from logits into out[:, i], and the decoder's state after it: the
        fused sampler updates the state itself where it draws the token (one launch;
        fused_step.ADVANCE_IN_SAMPLER), else _advance does."""
        if self.io_kernels and self.advance_in_sampler and pick.fused:
            pick(logits, self._state(i, slide))
        else:
            self._advance(pick(logits), i, slide=slide)

    def _state(self, i: int, slide: bool) -> DecoderState:
        """The state decode_advance updates, new tokens going to out[:, i]."""
        return native_ops().DecoderState(self.out, i, self.token, self.window, self.pos, slide)

    def _advance(self, new: Tensor, i: int, *, slide: bool) -> None:
        """After new (B,) is drawn: the fed id joins the window (at pos, then pos += 1; or the
        window slides by one), new goes to out[:, i] and becomes the id to feed."""
        if self.io_kernels:
            native_ops().decode_advance(new, self._state(i, slide))
            return
        if slide:
            self.window.copy_(torch.cat([self.window[:, 1:], self.token], dim=1))
        else:
            self.window.index_copy_(1, self.pos.view(1), self.token)  # the fed id, at pos
            self.pos.add_(1)
        self.out[:, i] = new
        self.token.copy_(new[:, None])

    def _halve_step(self, pick: Pick) -> None:
        """The window is full: keep its last T/2 ids, re-run them with the fed id at positions
        0 .. T/2 (the C engine's rule), one new token into out[:, 0]."""
        T, keep = self.block_size, self.block_size // 2
        ids = torch.cat([self.window[:, T - keep :], self.token], dim=1)  # (B, keep + 1)
        logits, _ = self.model(ids, last_only=True, kv_cache=self.cache, pos=0)
        new = pick(logits[:, -1])
        self.out[:, 0] = new
        self.window[:, : keep + 1] = ids
        self.token.copy_(new[:, None])
        self.pos.fill_(keep + 1)

    # --- graphs ------------------------------------------------------------------------------

    def _step(self, kind: str, n: int, pick: Pick) -> Callable[[], None]:
        """n steps of `kind`: "decode", "slide" or "halve" (always one token)."""
        if kind == "decode":
            return lambda: self._decode_steps(n, pick)
        if kind == "slide":
            return lambda: self._slide_steps(n, pick)
        return lambda: self._halve_step(pick)

    def _run(self, kind: str, n: int, pick: Pick, key: tuple) -> None:
        """Run n steps of `kind`: eagerly, or by replaying its graph (captured if new)."""
        if not self.cuda_graph:
            self._step(kind, n, pick)()
            return
        graph = self._graphs.get((kind, n, *key))
        if graph is None:
            graph = self._graphs[(kind, n, *key)] = self._capture(kind, self._step(kind, n, pick))
        graph.replay()

    def _capture(self, kind: str, step: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """Capture one step function. Its warm-up calls must not disturb a generation under way:
        the state is saved first and restored after, and decode warm-ups start at position 0 so
        they never run past the cache."""
        saved = (
            self.window.clone(),
            self.token.clone(),
            self.pos.clone(),
            self.sampler.clone(),
            self.generator.get_state(),
        )

        def warm() -> None:
            if kind == "decode":
                self.pos.zero_()
            step()

        run_on_side_stream(warm, self.device, calls=3)
        if kind == "decode":
            self.pos.zero_()  # capture records kernels only; no step runs here
        graph, _ = capture(step, self.device, warmup=0, generators=(self.generator,))
        window, token, pos, sampler, rng = saved
        self.window.copy_(window)
        self.token.copy_(token)
        self.pos.copy_(pos)
        self.sampler.copy_(sampler)
        self.generator.set_state(rng)
        return graph

    # --- generation --------------------------------------------------------------------------

    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        window: str = "slide",
        vocab_limit: int | None = None,
    ) -> Iterator[Tensor]:
        """Yield the new tokens in chunks: (B, k) int64 CPU tensors, max_new_tokens in all.

        idx: (B, T) int64 prompt on the model's device (any T >= 1: the window slides).
        vocab_limit: ids >= vocab_limit are never sampled (a padded vocabulary's extra rows).
        Arguments are checked before the first chunk (ModelError).
        """
        check_sampling(temperature, top_k, top_p)
        if window not in WINDOWS:
            raise ModelError(f"window {window!r} is unknown; choose one of {list(WINDOWS)}")
        if idx.dim() != 2 or idx.size(0) != self.batch_size or idx.size(1) < 1:
            raise ModelError(
                f"prompt must be ({self.batch_size}, T >= 1) token ids for this "
                f"decoder, got shape {tuple(idx.shape)}"
            )
        if (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or max_new_tokens < 0
        ):
            raise ModelError(f"max_new_tokens is {max_new_tokens!r}: it must be an integer >= 0")
        return self._generate(
            idx, max_new_tokens, temperature, top_k, top_p, seed, window, vocab_limit
        )

    @torch.no_grad()  # on a generator function, torch applies no_grad around each resume
    def _generate(
        self,
        idx: Tensor,
        n: int,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        seed: int | None,
        window: str,
        vocab_limit: int | None,
    ) -> Iterator[Tensor]:
        was_training = self.model.training
        self.model.eval()
        try:
            if n > 0:
                yield from self._chunks(
                    idx, n, temperature, top_k, top_p, seed, window, vocab_limit
                )
        finally:
            self.model.train(was_training)

    def _chunks(self, idx, n, temperature, top_k, top_p, seed, window, vocab_limit):
        key = (temperature, top_k, top_p, window, vocab_limit)
        fused_sampling = self.samples_fused(temperature, top_p)

        def draw(logits: Tensor, advance=None) -> Tensor:
            if fused_sampling:  # one launch (the sampler's Philox stream, not the generator's)
                return native_ops().sample_tokens(
                    logits, self.sampler, temperature=temperature, top_k=top_k,
                    vocab_limit=vocab_limit, advance=advance,
                )  # fmt: skip
            if vocab_limit is not None:
                logits = logits[:, :vocab_limit]
            return sample(
                logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=self.generator
            )

        pick = Pick(draw, fused_sampling)

        T = self.block_size
        L = window_length(idx.size(1), T, window)
        prompt = idx[:, -L:]
        self._capture_all(n, L, pick, key, window)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        if fused_sampling:  # its stream starts at draw 0 of the generator's seed (int64: 63 bits)
            state = native_ops().sampler_state(self.generator.initial_seed() % 2**63)
            self.sampler.copy_(state)  # in place: the captured graphs read this buffer
        # The prompt: one eager prefill at positions [0, L); its last logits give token 1.
        logits, _ = self.model(prompt, last_only=True, kv_cache=self.cache, pos=0)
        first = pick(logits[:, -1])
        self.window[:, :L] = prompt
        self.token.copy_(first[:, None])
        self.pos.fill_(L)
        # On CUDA the GPU works on the next chunk while the host reads the last one. Elsewhere
        # each chunk is done when it is queued: hold nothing back (that would delay the text,
        # and count a chunk's decoding as the first token's start-up in sample's tokens/s).
        keep = 1 if self.device.type == "cuda" else 0
        pending = [self._to_host(first[:, None])]
        while len(pending) > keep:
            yield self._read(pending.pop(0))
        pos, done = L, 1
        while done < n:
            if pos < T:
                k = self._largest_size(min(self.chunk, T - pos, n - done))
                self._run("decode", k, pick, key)
                pos += k
            elif window == "halve":
                k = 1
                self._run("halve", 1, pick, key)
                pos = T // 2 + 1
            else:
                k = self._largest_size(min(self.chunk, n - done))
                self._run("slide", k, pick, key)
            done += k
            pending.append(self._to_host(self.out[:, :k]))
            while len(pending) > keep:
                yield self._read(pending.pop(0))
        for p in pending:
            yield self._read(p)

    def _largest_size(self, n: int) -> int:
        """The largest captured size <= n: powers of two up to chunk, and chunk itself, so any
        count is a few replays and at most log2(chunk) + 2 graphs exist per setting."""
        if n >= self.chunk:
            return self.chunk
        return 1 << (n.bit_length() - 1)

    def _sizes(self) -> list[int]:
        sizes, s = {self.chunk}, 1
        while s < self.chunk:
            sizes.add(s)
            s *= 2
        return sorted(sizes)

    def _capture_all(self, n: int, prompt_len: int, pick, key: tuple, window: str) -> None:
        """Capture, before the prompt runs, every graph this generation can replay (capture
        costs are start-up, reported apart from steady-state tokens/s)."""
        if not self.cuda_graph:
            return
        T = self.block_size
        if n > 1 and prompt_len < T:
            for s in self._sizes():
                if s <= T and ("decode", s, *key) not in self._graphs:
                    self._graphs[("decode", s, *key)] = self._capture(
                        "decode", self._step("decode", s, pick)
                    )
        if n > 1 and prompt_len + n > T:
            kind = "halve" if window == "halve" else "slide"
            for s in [1] if kind == "halve" else self._sizes():
                if (kind, s, *key) not in self._graphs:
                    self._graphs[(kind, s, *key)] = self._capture(kind, self._step(kind, s, pick))

    def _to_host(self, ids: Tensor) -> tuple[Tensor, torch.cuda.Event | None]:
        """Start copying ids (B, k) to the host; returns (host tensor, event)."""
        if self.device.type != "cuda":
            return ids.clone(), None
        host = torch.empty(ids.shape, dtype=ids.dtype, pin_memory=True)
        host.copy_(ids, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, event

    @staticmethod
    def _read(pending: tuple[Tensor, torch.cuda.Event | None]) -> Tensor:
        host, event = pending
        if event is not None:
            event.synchronize()
        return host
