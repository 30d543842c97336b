"""Fixtures of the tokenizer tests: small trained tokenizers and GPT-2 (from the shared data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gptstack.tokenizer import BPETokenizer, CharTokenizer, GPT2Tokenizer, gpt2_tokenizer, train_bpe

SPECIALS = ("<|endoftext|>", "<|pad|>")


@pytest.fixture(scope="session")
def small_corpus(shakespeare_text: str) -> str:
    """40k characters of Tiny Shakespeare plus a little non-ASCII, enough for ~300 merges."""
    return shakespeare_text[:40_000] + " Ça va? naïve café — 東京 😀 1234567 “quotes”\n"


@pytest.fixture(scope="session", params=["gpt2", "gpt4"])
def small_bpe(request: pytest.FixtureRequest, small_corpus: str) -> BPETokenizer:
    """A byte-level BPE with 300 ids (2 of them special) for each pattern."""
    return train_bpe(small_corpus, 300, pattern=request.param, special_tokens=SPECIALS)


@pytest.fixture(scope="session")
def char_tok(shakespeare_text: str) -> CharTokenizer:
    return CharTokenizer.from_text(shakespeare_text, special_tokens=SPECIALS[:1])


@pytest.fixture(scope="session")
def gpt2(data_dir: Path) -> GPT2Tokenizer:
    return gpt2_tokenizer(data_dir / "gpt2.tiktoken")
