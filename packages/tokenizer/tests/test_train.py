"""The incremental BPE trainer against a plain reference that recounts every pair each step."""

from __future__ import annotations

import random
import re
from collections import Counter
from itertools import pairwise

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from gptstack.tokenizer import PATTERNS, TokenizerError, train_bpe


def reference_train(
    text: str, vocab_size: int, pattern: str, specials: tuple[str, ...] = ()
) -> list[tuple[int, int]]:
    """Textbook byte-level BPE: recount all pairs every step, take the highest count (ties: the
    smallest (left, right)), skip pairs whose bytes already are a token."""
    parts = [text]
    if specials:
        alternatives = "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))
        parts = re.split(alternatives, text)
    chunks = [
        list(c.encode("utf-8")) for part in parts for c in regex.findall(PATTERNS[pattern], part)
    ]
    vocab = [bytes([b]) for b in range(256)]
    merges: list[tuple[int, int]] = []
    while 256 + len(merges) + len(specials) < vocab_size:
        counts: Counter[tuple[int, int]] = Counter()
        for chunk in chunks:
            counts.update(pairwise(chunk))
        best = None
        for pair in sorted(counts, key=lambda p: (-counts[p], p)):
            if vocab[pair[0]] + vocab[pair[1]] in vocab:
                continue
            best = pair
            break
        if best is None:
            break
        new_id = 256 + len(merges)
        merges.append(best)
        vocab.append(vocab[best[0]] + vocab[best[1]])
        chunks = [_merge(chunk, best, new_id) for chunk in chunks]
    return merges


def _merge(chunk: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out, i = [], 0
    while i < len(chunk):
        if i + 1 < len(chunk) and (chunk[i], chunk[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(chunk[i])
            i += 1
    return out


# Few distinct symbols, so counts tie often and runs ("aaaa") exercise overlapping pairs; plus
# spaces, newlines, digits, an apostrophe and non-ASCII for the pre-tokenization patterns.
ALPHABET = "aab b  \n\n1'.é😀"
SPECIALS = ("<s>", "<|eot|>")


def random_corpus(rng: random.Random, n_words: int) -> str:
    words = []
    for _ in range(n_words):
        word = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.05:
            word += rng.choice(SPECIALS)
        words.append(word)
    return "".join(words)


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
@pytest.mark.parametrize("specials", [(), SPECIALS])
def test_matches_reference_on_seeded_corpora(pattern: str, specials: tuple[str, ...]) -> None:
    rng = random.Random(1234)
    for _ in range(8):
        text = random_corpus(rng, rng.randint(20, 400))
        vocab_size = rng.randint(256 + len(specials), 256 + len(specials) + 80)
        expected = reference_train(text, vocab_size, pattern, specials)
        tok = train_bpe(text, vocab_size, pattern=pattern, special_tokens=specials)
        assert tok.merges == expected
        n_ordinary = 256 + len(expected)
        assert tok.special_tokens == {s: n_ordinary + k for k, s in enumerate(specials)}
        assert tok.vocab_size == n_ordinary + len(specials)


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=ALPHABET + "<>|seot", max_size=300),
    extra=st.integers(0, 60),
    pattern=st.sampled_from(["gpt2", "gpt4"]),
    use_specials=st.booleans(),
)
def test_matches_reference_hypothesis(
    text: str, extra: int, pattern: str, use_specials: bool
) -> None:
    specials = SPECIALS if use_specials else ()
    vocab_size = 256 + len(specials) + extra
    expected = reference_train(text, vocab_size, pattern, specials)
    assert train_bpe(text, vocab_size, pattern=pattern, special_tokens=specials).merges == expected


def test_matches_reference_on_shakespeare(shakespeare_text: str) -> None:
    text = shakespeare_text[:20_000]
    expected = reference_train(text, 300, "gpt2")
    assert train_bpe(text, 300, pattern="gpt2").merges == expected


def test_tie_break_prefers_smallest_pair() -> None:
    # "ab" and "cd" both occur twice; (97, 98) < (99, 100), so "ab" is merged first.
    tok = train_bpe("cd\nab\ncd\nab", 257, pattern="gpt2")
    assert tok.merges[0] == (ord("a"), ord("b"))


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet="aab b\n1é", max_size=400), extra=st.integers(0, 120))
def test_token_bytes_unique_and_built_from_merges(text: str, extra: int) -> None:
    """What the duplicate-bytes rule protects: every token's bytes differ (tiktoken needs it)."""
    tok = train_bpe(text, 256 + extra, pattern="gpt2")
    table = tok.token_bytes()
    assert len(set(table)) == len(table)
    assert all(table[256 + i] == table[l] + table[r] for i, (l, r) in enumerate(tok.merges))


def test_special_token_text_is_not_learned() -> None:
    tok = train_bpe("<|eot|>hello<|eot|>hello<|eot|>", 300, special_tokens=["<|eot|>"])
    assert not any(b"<" in t or b"|" in t for t in tok.token_bytes()[256 : 256 + len(tok.merges)])


def test_progress_reports_each_merge() -> None:
    calls: list[tuple[int, int]] = []
    tok = train_bpe("the cat sat on the mat " * 20, 270, progress=lambda s, t: calls.append((s, t)))
    assert calls == [(i + 1, 14) for i in range(len(tok.merges))]


def test_stops_early_when_no_pairs_left() -> None:
    # Chunks "ab", " ab": merge a+b (2 occurrences), then " "+ab (1), then nothing is left.
    tok = train_bpe("ab ab", 400)
    assert tok.merges == [(ord("a"), ord("b")), (ord(" "), 256)]
    assert tok.vocab_size == 258
    assert tok.encode("ab ab") == [256, 257]


def test_bad_arguments() -> None:
    with pytest.raises(TokenizerError, match="vocab_size 257 is too small"):
        train_bpe("abc", 257, special_tokens=["<a>", "<b>"])
    with pytest.raises(TokenizerError, match="unknown pre-tokenization pattern 'gpt3'"):
        train_bpe("abc", 300, pattern="gpt3")
    with pytest.raises(TokenizerError, match="listed twice"):
        train_bpe("abc", 300, special_tokens=["<a>", "<a>"])
    with pytest.raises(TokenizerError, match="lone surrogate '\\\\udc80' at position 2"):
        train_bpe("ab\udc80c", 300)


def test_shakespeare_vocab_512(shakespeare_text: str) -> None:
    """The preset size on the default corpus: full vocabulary, exact round trip, compression."""
    tok = train_bpe(shakespeare_text, 512, pattern="gpt2", special_tokens=["<|endoftext|>"])
    assert tok.vocab_size == 512
    ids = tok.encode(shakespeare_text)
    assert tok.decode(ids) == shakespeare_text
    assert max(ids) < 511  # the special token never comes out of ordinary text
    assert len(shakespeare_text.encode("utf-8")) / len(ids) > 1.5
