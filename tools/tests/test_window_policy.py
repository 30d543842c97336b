"""PyTorch decoding with `--window halve` writes what the chip writes past the context.

The chip's arithmetic is the numpy reference (gptstack.quant.reference, bit-exact with the C
engine: firmware/esp32/host/tests/test_engine_reference.py). Its int8 *activations* alone make
greedy text drift from a float model after a few dozen tokens (token 39 of the committed esp32
artifact), so the comparison runs the reference with act="fp32" -- the same int8 weights, the
same sliding rule (FORMAT.md section 8), float activations -- against PyTorch on the
dequantized weights: then only the window policy can make them differ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gptstack.model import GPT, GPTConfig, generate, window_length
from gptstack.quant import read_artifact
from gptstack.quant.reference import Session

ARTIFACT = Path(__file__).resolve().parents[2] / "firmware" / "esp32" / "data" / "model.gsm"


@pytest.fixture(scope="module")
def chip():
    art = read_artifact(ARTIFACT)
    s = art.spec
    model = GPT(
        GPTConfig(
            vocab_size=s.vocab_size,
            block_size=s.block_size,
            n_layer=s.n_layer,
            n_head=s.n_head,
            n_embd=s.n_embd,
            bias=s.bias,
        )
    )
    state = {n: torch.from_numpy(np.ascontiguousarray(art.dequantized(n))) for n in art.names}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= set(GPT.tied_parameters)
    return art, model.eval()


def reference_greedy(art, prompt: list[int], n: int) -> tuple[list[int], int]:
    session = Session(art, act="fp32")
    logits = None
    for t in prompt:
        logits = session.feed(t)
    out = []
    for _ in range(n):
        out.append(int(np.argmax(logits)))
        logits = session.feed(out[-1])
    return out, len(session.window)


@pytest.mark.slow
@pytest.mark.parametrize("prompt_len", [1, 80])
def test_halve_follows_the_chip_past_the_context(chip, prompt_len):
    art, model = chip
    T = art.spec.block_size
    rng = np.random.default_rng(prompt_len)
    prompt = [art.spec.bos_token] + rng.integers(0, art.spec.vocab_size, prompt_len - 1).tolist()
    n = 2 * T + 8  # two halvings
    ref, ref_window = reference_greedy(art, prompt, n)
    assert ref_window == window_length(len(prompt) + n, T, "halve")
    idx = torch.tensor([prompt])
    for mode in ("kv", "graph"):  # naive == kv under both policies: packages/model tests
        halve = generate(model, idx, n, mode=mode, temperature=0, window="halve")
        assert halve[0, len(prompt) :].tolist() == ref, mode
    slide = generate(model, idx, n, mode="kv", temperature=0, window="slide")
    assert slide[0, len(prompt) :].tolist() != ref  # the default policy is not the chip's
