"""Fixtures for gptstack.quant tests: small configs and synthetic artifacts built on demand."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from gptstack.quant import ModelSpec, read_artifact, synthetic_artifact, synthetic_tables


@pytest.fixture(scope="session")
def bpe_tables():
    """300 tokens: 256 bytes, 43 merges, <|endoftext|>."""
    return synthetic_tables("bpe", 300, seed=11)


@pytest.fixture(scope="session")
def tiny_spec(bpe_tables):
    """A small model: every code path, fast on 2 cores. V > Vt, so ids 300..319 are padding."""
    return ModelSpec(
        vocab_size=320,
        block_size=16,
        n_layer=2,
        n_head=4,
        n_embd=32,
        bias=True,
        bos_token=bpe_tables.special_ids[0],
    )


@pytest.fixture(scope="session")
def tiny_bytes(tiny_spec, bpe_tables) -> bytes:
    return synthetic_artifact(tiny_spec, bpe_tables, seed=5)


@pytest.fixture(scope="session")
def tiny_artifact(tiny_bytes):
    return read_artifact(tiny_bytes)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's name: fresh inputs per test, reproducible per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
