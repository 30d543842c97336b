"""Behaviour of each kind beyond round trips: the char vocabulary and its errors, the token
table and ranks of the BPE kinds, special-token selection, and GPT-2's ranks file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gptstack.tokenizer import (
    BPETokenizer,
    CharTokenizer,
    GPT2Tokenizer,
    TokenizerError,
    UnknownCharacterError,
    default_data_dir,
    gpt2_tokenizer,
)


def test_char_vocab_is_sorted_unique_characters() -> None:
    tok = CharTokenizer.from_text("hello, world")
    assert tok.vocab == sorted(set("hello, world"))
    assert tok.vocab_size == len(set("hello, world"))
    assert tok.encode("low") == [tok.vocab.index(c) for c in "low"]
    assert tok.kind == "char" and tok.pattern_name is None


def test_char_unknown_character_names_character_and_position() -> None:
    tok = CharTokenizer.from_text("abc ")
    with pytest.raises(UnknownCharacterError) as info:
        tok.encode("ab cz a")
    assert info.value.character == "z" and info.value.position == 4
    message = str(info.value)
    assert "'z'" in message and "position 4" in message and "build the tokenizer" in message


def test_char_unknown_character_position_after_special() -> None:
    tok = CharTokenizer.from_text("abc", special_tokens=["<eot>"])
    assert tok.encode("a<eot>b", allowed_special="all") == [0, 3, 1]
    with pytest.raises(UnknownCharacterError) as info:
        tok.encode("a<eot>bé", allowed_special="all")
    assert info.value.position == 7
    with pytest.raises(UnknownCharacterError):  # not allowed: '<' is plain text, not in vocab
        tok.encode("a<eot>")


def test_char_rejects_bad_vocab() -> None:
    with pytest.raises(TokenizerError, match="at least one character"):
        CharTokenizer.from_text("")
    with pytest.raises(TokenizerError, match="not a single character"):
        CharTokenizer(["a", "bc"])
    with pytest.raises(TokenizerError, match="appears twice"):
        CharTokenizer(["a", "b", "a"])
    with pytest.raises(TokenizerError, match="surrogate"):
        CharTokenizer.from_text("a\ud800")


def test_char_has_no_merge_ranks(char_tok: CharTokenizer) -> None:
    with pytest.raises(TokenizerError, match="no BPE merge ranks"):
        char_tok.mergeable_ranks()


@pytest.mark.parametrize("kind", ["char", "bpe", "gpt2"])
def test_token_table(
    kind: str, char_tok: CharTokenizer, small_bpe: BPETokenizer, gpt2: GPT2Tokenizer
) -> None:
    tok = {"char": char_tok, "bpe": small_bpe, "gpt2": gpt2}[kind]
    table = tok.token_bytes()
    assert len(table) == tok.vocab_size
    assert all(len(token) >= 1 for token in table)
    for name, i in tok.special_tokens.items():
        assert table[i] == name.encode("utf-8")
    ordinary = [t for i, t in enumerate(table) if i not in tok.special_tokens.values()]
    assert len(set(ordinary)) == len(ordinary)
    for i in range(0, tok.vocab_size, max(1, tok.vocab_size // 500)):
        assert tok.decode_bytes([i]) == table[i]
    if kind != "char":
        assert tok.mergeable_ranks() == {t: i for i, t in enumerate(table[: len(ordinary)])}


def test_bpe_layout(small_bpe: BPETokenizer) -> None:
    table = small_bpe.token_bytes()
    assert table[:256] == [bytes([b]) for b in range(256)]
    assert all(table[256 + i] == table[l] + table[r] for i, (l, r) in enumerate(small_bpe.merges))
    assert small_bpe.vocab_size == 300
    assert list(small_bpe.special_tokens.values()) == [298, 299]


def test_bpe_constructor_rejects_bad_merges() -> None:
    with pytest.raises(TokenizerError, match="may only join ids 0..256"):
        BPETokenizer([(97, 98), (97, 400)])
    with pytest.raises(TokenizerError, match="repeats merge 0"):
        BPETokenizer([(97, 98), (97, 98)])
    with pytest.raises(TokenizerError, match="already has"):
        BPETokenizer([(97, 97), (256, 97), (97, 256)])
    with pytest.raises(TokenizerError, match="unknown pre-tokenization pattern"):
        BPETokenizer([], pattern="gpt5")


def test_allowed_special_validation(small_bpe: BPETokenizer) -> None:
    with pytest.raises(TokenizerError, match="not special tokens"):
        small_bpe.encode("x", allowed_special={"<|nope|>"})
    with pytest.raises(TokenizerError, match="is a string"):
        small_bpe.encode("x", allowed_special="<|endoftext|>")


def test_decode_rejects_unknown_ids(
    char_tok: CharTokenizer, small_bpe: BPETokenizer, gpt2: GPT2Tokenizer
) -> None:
    for tok in (char_tok, small_bpe, gpt2):
        for bad in (tok.vocab_size, -1, 2**70, 1.5, None):
            with pytest.raises(TokenizerError, match=f"token id {bad} is not in this"):
                tok.decode([0, bad])


def test_gpt2_known_ids(gpt2: GPT2Tokenizer) -> None:
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.special_tokens == {"<|endoftext|>": 50256}
    assert gpt2.vocab_size == 50257
    assert gpt2.encode("<|endoftext|>", allowed_special="all") == [50256]
    assert 50256 not in gpt2.encode("<|endoftext|>")
    assert gpt2.kind == "gpt2" and gpt2.pattern_name == "gpt2"


def test_gpt2_found_through_data_dir(
    data_dir: Path, gpt2: GPT2Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPTSTACK_DATA_DIR", str(data_dir))
    assert default_data_dir() == data_dir
    assert gpt2_tokenizer().encode("Hello world") == [15496, 995]


def test_gpt2_rejects_wrong_hash(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "gpt2.tiktoken"
    content = (data_dir / "gpt2.tiktoken").read_bytes()
    changed = content.replace(b" 15496\n", b" 15497\n", 1)  # one rank changed
    assert changed != content
    bad.write_bytes(changed)
    with pytest.raises(TokenizerError, match="SHA-256"):
        gpt2_tokenizer(bad)
    monkeypatch.setenv("GPTSTACK_DATA_DIR", str(tmp_path))  # the implicit location is checked too
    with pytest.raises(TokenizerError, match="expected 306cd27f"):
        gpt2_tokenizer()


def test_gpt2_explicit_path(data_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ranks.tiktoken"
    shutil.copy(data_dir / "gpt2.tiktoken", copy)
    assert gpt2_tokenizer(copy).encode("Hello world") == [15496, 995]
    with pytest.raises(TokenizerError, match="not found"):
        gpt2_tokenizer(tmp_path / "missing.tiktoken")


def test_default_data_dir_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPTSTACK_DATA_DIR")
    assert default_data_dir() == Path.home() / ".cache" / "gptstack" / "data"
