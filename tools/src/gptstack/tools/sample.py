"""`gptstack sample`: stream text from a checkpoint as it is generated, then report tokens/s."""

from __future__ import annotations

import codecs
import sys
import time
from dataclasses import dataclass
from typing import TextIO

import torch

from gptstack.model import stream
from gptstack.tokenizer import Tokenizer

from .checkpoint import Checkpoint
from .defaults import SAMPLING
from .errors import GptstackError


@dataclass
class SampleResult:
    text: str
    new_tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("nan")


def prompt_ids(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """The prompt's ids; an empty prompt starts from <|endoftext|> if the tokenizer has it, else a newline."""
    if prompt:
        return tokenizer.encode(prompt)
    eot = tokenizer.special_tokens.get("<|endoftext|>")
    return [eot] if eot is not None else tokenizer.encode("\n")


def sample(ckpt: Checkpoint, prompt: str, *, tokens: int,
           temperature: float = SAMPLING.temperature, top_k: int | None = SAMPLING.top_k,
           top_p: float | None = SAMPLING.top_p, seed: int | None = None,
           mode: str = "kv", out: TextIO | None = sys.stdout) -> SampleResult:
    """Generate `tokens` new tokens after `prompt`, writing text to `out` as it is produced."""
    if tokens < 0:
        raise GptstackError(f"--tokens must be >= 0, got {tokens}")
    ids = prompt_ids(ckpt.tokenizer, prompt)
    device = next(ckpt.model.parameters()).device
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    # A multi-byte character can be split across tokens: decode bytes incrementally.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces = [prompt]
    if out is not None:
        out.write(prompt)
        out.flush()
    start = time.perf_counter()
    n = 0
    for token in stream(ckpt.model, idx, tokens, mode=mode, temperature=temperature,
                        top_k=top_k, top_p=top_p, seed=seed):
        n += 1
        text = decoder.decode(ckpt.tokenizer.decode_bytes([int(token[0])]))
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
    return SampleResult("".join(pieces), n, seconds)
