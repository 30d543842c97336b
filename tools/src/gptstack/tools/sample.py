"""`gptstack sample`: stream text from a checkpoint as it is generated, then report tokens/s.

On CUDA the default decoder is the graph decoder (gptstack.model.GraphDecoder: static KV cache,
sampling on the GPU, 32 tokens per CUDA-graph replay, ids copied to a pinned host buffer while the
next chunk runs), with the weights in bf16; on a CPU the KV-cache decoder, in bf16 where the CPU
computes it natively (AVX512-BF16 or AMX, as training's auto dtype) and in fp32 elsewhere. Start-up
(graph capture, compilation, the prompt) is timed apart from the steady-state rate, which counts
the tokens after the first one over the time after the first one.
"""

from __future__ import annotations

import codecs
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

import torch

from gptstack.model import GraphDecoder, ModelError, stream
from gptstack.tokenizer import Tokenizer

from .checkpoint import Checkpoint
from .defaults import SAMPLING
from .errors import GptstackError
from .runtime import auto_dtype
from .threads import DecodeThreads

MODES = ("auto", "naive", "kv", "static", "graph")
KERNELS = {"auto": None, "gptstack": True, "torch": False}  # -> GraphDecoder(fused=...)
WINDOWS = ("slide", "halve")


@dataclass
class SampleResult:
    text: str
    new_tokens: int
    seconds: float  # the whole generation, start-up included
    startup_s: float  # until the first new token: capture, compilation, the prompt's prefill
    mode: str  # the decoder that ran
    dtype: str
    kernels: str = "torch"  # the one-token step: "gptstack" (fused decode kernels) or "torch"
    sampler: str = "torch"  # who draws tokens: "gptstack" (sample_tokens) or "torch"
    one_launch: bool = False  # the cached step's blocks ran as one decode_blocks launch
    threads: DecodeThreads | None = None  # on a CPU: the threads of each phase (threads.py)

    @property
    def tokens_per_s(self) -> float:
        """Steady state: the tokens after the first over the time after the first."""
        steady = self.seconds - self.startup_s
        return (
            (self.new_tokens - 1) / steady if self.new_tokens > 1 and steady > 0 else float("nan")
        )


def prompt_ids(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """The prompt's ids; an empty prompt starts from <|endoftext|> if the tokenizer has it, else
    from a newline."""
    if prompt:
        return tokenizer.encode(prompt)
    eot = tokenizer.special_tokens.get("<|endoftext|>")
    return [eot] if eot is not None else tokenizer.encode("\n")


def resolve_mode(mode: str, device: torch.device) -> str:
    """ "auto": the graph decoder on CUDA, the KV-cache decoder on a CPU (where a graph cannot
    be captured and the growing cache does the least work)."""
    if mode not in MODES:
        raise GptstackError(f"--mode {mode!r} is unknown: choose one of {', '.join(MODES)}")
    if mode == "auto":
        return "graph" if device.type == "cuda" else "kv"
    return mode


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """ "auto": training's rule (runtime.auto_dtype): bf16 weights on CUDA (half the bytes per
    decode step) and on CPUs with native bf16 (1.8x the tokens/s of fp32 at shakespeare-char and
    1.4x at esp32 on the AVX512-BF16 development machine:
    benchmarks/results/sample-speed-*-cpu-20261206.json), fp32 on other CPUs, where bf16 is
    emulated and slow."""
    table = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if dtype == "auto":
        dtype = auto_dtype(device)
    if dtype not in table:
        raise GptstackError(f"--dtype {dtype!r} is unknown: choose auto, fp32 or bf16")
    return table[dtype]


def _token_chunks(
    ckpt: Checkpoint,
    idx: torch.Tensor,
    tokens: int,
    mode: str,
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int | None,
    window: str,
    graph: GraphDecoder | None,
) -> Iterator[list[int]]:
    """The new ids of row 0, in the chunks the decoder produces them: `graph` for the graph
    mode, decoding.stream for the others."""
    vocab_limit = ckpt.tokenizer.vocab_size  # padded rows of the embedding are never drawn
    if graph is not None:
        for chunk in graph.generate(
            idx,
            tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            window=window,
            vocab_limit=vocab_limit,
        ):
            yield chunk[0].tolist()
        return
    for token in stream(
        ckpt.model,
        idx,
        tokens,
        mode=mode,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        window=window,
        vocab_limit=vocab_limit,
    ):
        yield [int(token[0])]


def sample(
    ckpt: Checkpoint,
    prompt: str,
    *,
    tokens: int,
    temperature: float = SAMPLING.temperature,
    top_k: int | None = SAMPLING.top_k,
    top_p: float | None = SAMPLING.top_p,
    seed: int | None = None,
    mode: str = "auto",
    window: str = "slide",
    dtype: str = "auto",
    compile: bool = False,
    kernels: str = "auto",
    fused_sampling: bool = True,
    out: TextIO | None = sys.stdout,
) -> SampleResult:
    """Generate `tokens` new tokens after `prompt`, writing text to `out` as it is produced.

    kernels: the graph decoder's one-token step: "gptstack" = gptstack.cuda_ops' fused decode
    kernels, "torch" = PyTorch's modules, "auto" = the fused kernels where they can run.
    fused_sampling: with the fused step, tokens are drawn by gptstack.cuda_ops.sample_tokens
    (temperature and top-k; not top-p); False keeps PyTorch's sampling (for comparisons)."""
    if tokens < 0:
        raise GptstackError(f"--tokens must be >= 0, got {tokens}")
    if kernels not in KERNELS:
        raise GptstackError(f"--kernels {kernels!r} is unknown: choose auto, gptstack or torch")
    if window not in WINDOWS:
        raise GptstackError(f"--window {window!r} is unknown: choose slide or halve")
    device = next(ckpt.model.parameters()).device
    mode = resolve_mode(mode, device)
    weights = resolve_dtype(dtype, device)
    ckpt.model.to(weights)
    ids = prompt_ids(ckpt.tokenizer, prompt)
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    # A multi-byte character can be split across tokens: decode bytes incrementally.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces = [prompt]
    if out is not None:
        out.write(prompt)
        out.flush()
    threads = DecodeThreads(
        device, batch=1, prompt_len=len(ids), block_size=ckpt.model.config.block_size,
        n_params=ckpt.model.num_params(), window=window, mode=mode,
    )  # fmt: skip
    threads.before(0)
    start = time.perf_counter()  # the graph decoder's construction counts as start-up
    first_at, n = None, 0
    graph = None
    if mode == "graph":
        try:
            graph = GraphDecoder(
                ckpt.model, batch_size=1, compile=compile, fused=KERNELS[kernels],
                fused_sampling=fused_sampling,
            )  # fmt: skip
        except ModelError as e:  # --kernels gptstack where the fused step cannot run
            raise GptstackError(f"--kernels gptstack: {e}") from None
    for chunk in _token_chunks(
        ckpt,
        idx,
        tokens,
        mode,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        window=window,
        graph=graph,
    ):
        if first_at is None:
            first_at = time.perf_counter()
        n += len(chunk)
        threads.before(n)  # the next token's phase
        text = decoder.decode(ckpt.tokenizer.decode_bytes(chunk))
        if text:
            pieces.append(text)
            if out is not None:
                out.write(text)
                out.flush()
    seconds = time.perf_counter() - start
    tail = decoder.decode(b"", final=True)
    pieces.append(tail)
    if out is not None:
        out.write(tail + "\n")
    startup = (first_at - start) if first_at is not None else seconds
    return SampleResult(
        "".join(pieces),
        n,
        seconds,
        startup,
        mode,
        {torch.float32: "fp32", torch.bfloat16: "bf16"}[weights],
        "gptstack" if graph is not None and graph.fused else "torch",
        "gptstack" if graph is not None and graph.samples_fused(temperature, top_p) else "torch",
        graph is not None and graph.step is not None and graph.step.blocks_in_one_launch,
        threads,
    )
