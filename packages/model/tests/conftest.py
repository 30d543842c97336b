"""Fixtures and builders shared by the gptstack.model tests (tiny configs, CPU only)."""

from __future__ import annotations

import pytest
import torch

from gptstack.model import GPT, GPTConfig


def tiny_config(**overrides) -> GPTConfig:
    """A model small enough that a forward pass takes about a millisecond on one CPU core."""
    fields = dict(vocab_size=37, block_size=16, n_layer=2, n_head=4, n_embd=32)
    fields.update(overrides)
    return GPTConfig(**fields)


def make_gpt(seed: int = 0, *, scramble: float | None = None, **overrides) -> GPT:
    """A seeded tiny GPT in eval mode. scramble=std re-draws every parameter from N(0, std):
    GPT-2 init gives near-uniform logits, whose greedy output collapses to one repeated token,
    which would make decoding comparisons too easy to pass."""
    torch.manual_seed(seed)
    model = GPT(tiny_config(**overrides))
    if scramble is not None:
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, scramble)
    return model.eval()


def random_tokens(seed: int, B: int, T: int, V: int) -> torch.Tensor:
    """(B, T) int64 token ids from a fresh seeded generator."""
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| (docs/MEASURING.md rule 5)."""
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Run each model test on one intra-op thread, then restore the setting. The tensors here
    are tiny, and on a busy 2-core machine two spinning OpenMP threads made the 200-step
    training test 10-20x slower than one thread (measured: ~30 s vs ~2 s under load)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# pytest runs with --import-mode=importlib (root pyproject), so test modules cannot import this
# file; the builders reach them as factory fixtures instead.
@pytest.fixture(name="make_gpt")
def make_gpt_fixture():
    return make_gpt


@pytest.fixture(name="random_tokens")
def random_tokens_fixture():
    return random_tokens


@pytest.fixture(name="rel_err")
def rel_err_fixture():
    return rel_err


@pytest.fixture(name="tiny_config")
def tiny_config_fixture():
    return tiny_config
