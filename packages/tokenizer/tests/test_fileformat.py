"""tokenizer.json: save/load round trips, the fingerprint, and rejection of damaged files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gptstack.tokenizer import (
    BPETokenizer,
    CharTokenizer,
    GPT2Tokenizer,
    Tokenizer,
    TokenizerError,
    TokenizerFileError,
    load_tokenizer,
    tokenizer_from_dict,
    train_bpe,
)

PROBE = "To be, or not to be: that is the question.\n<|endoftext|>Ça va? 東京 😀"


@pytest.fixture(params=["char", "bpe", "gpt2"])
def any_tok(
    request: pytest.FixtureRequest,
    char_tok: CharTokenizer,
    small_bpe: BPETokenizer,
    gpt2: GPT2Tokenizer,
) -> Tokenizer:
    return {"char": char_tok, "bpe": small_bpe, "gpt2": gpt2}[request.param]


def probe_for(tok: Tokenizer, allowed: Any) -> str:
    if isinstance(tok, CharTokenizer):  # only characters of its vocabulary (+ its special)
        return "".join(c for c in PROBE if c in tok.vocab) + ("<|endoftext|>" if allowed else "")
    return PROBE


def test_save_load_round_trip(any_tok: Tokenizer, tmp_path: Path) -> None:
    path = any_tok.save(tmp_path / "tokenizer.json")
    loaded = load_tokenizer(path)
    assert type(loaded) is type(any_tok)
    assert loaded.to_dict() == any_tok.to_dict()
    assert loaded.token_bytes() == any_tok.token_bytes()
    for allowed in ((), "all"):
        text = probe_for(any_tok, allowed)
        assert loaded.encode(text, allowed_special=allowed) == any_tok.encode(
            text, allowed_special=allowed
        )
    assert loaded.fingerprint() == any_tok.fingerprint()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == any_tok.fingerprint()
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]  # no temporary left over


def test_save_overwrites(small_bpe: BPETokenizer, char_tok: CharTokenizer, tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    char_tok.save(path)
    small_bpe.save(path)
    assert load_tokenizer(path).fingerprint() == small_bpe.fingerprint()


def test_save_into_missing_folder(small_bpe: BPETokenizer, tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="cannot write tokenizer file"):
        small_bpe.save(tmp_path / "no-such-folder" / "tokenizer.json")


def test_fingerprint_distinguishes_tokenizers(small_corpus: str) -> None:
    a = train_bpe(small_corpus, 280)
    assert a.fingerprint() == train_bpe(small_corpus, 280).fingerprint()
    assert a.fingerprint() != train_bpe(small_corpus, 281).fingerprint()
    assert a.fingerprint() != train_bpe(small_corpus, 280, pattern="gpt4").fingerprint()
    assert a.fingerprint() != train_bpe(small_corpus, 281, special_tokens=["<s>"]).fingerprint()


def test_file_layout(small_bpe: BPETokenizer, tmp_path: Path) -> None:
    data = json.loads(small_bpe.save(tmp_path / "t.json").read_text(encoding="utf-8"))
    assert list(data) == ["format", "version", "kind", "pattern", "merges", "special_tokens"]
    assert data["format"] == "gptstack-tokenizer" and data["version"] == 1
    assert data["merges"] == [list(m) for m in small_bpe.merges]


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def rejected(path: Path, *fragments: str) -> TokenizerFileError:
    with pytest.raises(TokenizerFileError) as info:
        load_tokenizer(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return info.value


def test_rejects_truncated_and_non_json(small_bpe: BPETokenizer, tmp_path: Path) -> None:
    path = small_bpe.save(tmp_path / "tokenizer.json")
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    rejected(path, "is not valid JSON", "truncated")
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    rejected(path, "is not UTF-8")
    path.write_text("merges = [1, 2]", encoding="utf-8")
    rejected(path, "is not valid JSON")
    path.write_text("[1, 2]", encoding="utf-8")
    rejected(path, "not an object")
    rejected(tmp_path / "missing.json", "not found")


@pytest.mark.parametrize(
    ("version", "fragment"),
    [
        (2, "upgrade gptstack-tokenizer"),
        (0, "reads version 1"),
        ("1", "not an integer"),
        (None, "not an integer"),
        (True, "not an integer"),
    ],
)
def test_rejects_wrong_version(
    small_bpe: BPETokenizer, tmp_path: Path, version: Any, fragment: str
) -> None:
    data = small_bpe.to_dict() | {"version": version}
    rejected(write(tmp_path, data), fragment)


@pytest.mark.parametrize("kind", ["char", "bpe", "gpt2"])
def test_rejects_missing_keys(
    kind: str,
    char_tok: CharTokenizer,
    small_bpe: BPETokenizer,
    gpt2: GPT2Tokenizer,
    tmp_path: Path,
) -> None:
    data = {"char": char_tok, "bpe": small_bpe, "gpt2": gpt2}[kind].to_dict()
    for key in data:
        broken = {k: v for k, v in data.items() if k != key}
        error = rejected(write(tmp_path, broken))
        assert key in error.problem or "format" in error.problem


def test_rejects_bad_header(small_bpe: BPETokenizer, tmp_path: Path) -> None:
    data = small_bpe.to_dict()
    rejected(write(tmp_path, data | {"format": "hf-tokenizers"}), "not a gptstack tokenizer")
    rejected(write(tmp_path, data | {"kind": "wordpiece"}), "unknown kind 'wordpiece'")
    rejected(write(tmp_path, data | {"vocab": ["a"]}), "unexpected key(s) ['vocab']")
    rejected(write(tmp_path, data | {"pattern": "gpt3"}), "pattern 'gpt3'")
    rejected(write(tmp_path, data | {"pattern": None}), "pattern None")
    rejected(write(tmp_path, data | {"kind": ["bpe"]}), "unknown kind ['bpe']")
    rejected(write(tmp_path, data | {"pattern": ["gpt2"]}), "pattern ['gpt2']")


@pytest.mark.parametrize(
    ("merges", "fragment"),
    [
        ([[97, 98], [256, 257]], "may only join ids 0..256"),  # refers to itself
        ([[97, 98], [-1, 98]], "may only join"),
        ([[97, 98], [97, 98]], "repeats merge 0"),
        ([[97, 97], [256, 97], [97, 256]], "already has"),  # "aaa" twice
        ([[97, 98], [97]], "not a pair"),
        ([[97, 98], [97, 98, 99]], "not a pair"),
        ([[97, 98], [97, 98.0]], "not a pair"),
        ([[97, 98], [True, 98]], "not a pair"),
        ({"0": [97, 98]}, "merges is not a list"),
    ],
)
def test_rejects_bad_merges(tmp_path: Path, merges: Any, fragment: str) -> None:
    n = len(merges) if isinstance(merges, list) else 0
    data = {
        "format": "gptstack-tokenizer",
        "version": 1,
        "kind": "bpe",
        "pattern": "gpt2",
        "merges": merges,
        "special_tokens": {"<s>": 256 + n},
    }
    rejected(write(tmp_path, data), fragment)


def test_rejects_bad_special_tokens(
    small_bpe: BPETokenizer, char_tok: CharTokenizer, tmp_path: Path
) -> None:
    data = small_bpe.to_dict()
    rejected(write(tmp_path, data | {"special_tokens": {"<a>": 5}}), "special token ids [5]")
    rejected(write(tmp_path, data | {"special_tokens": {"<a>": 299}}), "must be [298]")
    rejected(write(tmp_path, data | {"special_tokens": {"": 298}}), "not a non-empty string")
    rejected(write(tmp_path, data | {"special_tokens": ["<a>"]}), "special_tokens")
    rejected(write(tmp_path, data | {"special_tokens": {"<a>": "298"}}), "special_tokens")
    gpt2_like = {
        "format": "gptstack-tokenizer",
        "version": 1,
        "kind": "gpt2",
        "pattern": "gpt2",
        "special_tokens": {"<|endoftext|>": 50257},
    }
    rejected(write(tmp_path, gpt2_like), "GPT-2 has")
    char = char_tok.to_dict()
    rejected(
        write(tmp_path, char | {"vocab": char["vocab"][:-1] + ["ab"]}), "not a single character"
    )
    rejected(write(tmp_path, char | {"pattern": "gpt2"}), "must be null")


def test_tokenizer_from_dict_matches_load(small_bpe: BPETokenizer) -> None:
    assert tokenizer_from_dict(small_bpe.to_dict()).fingerprint() == small_bpe.fingerprint()
    with pytest.raises(TokenizerFileError, match="<dict>"):
        tokenizer_from_dict({"format": "gptstack-tokenizer"})


@pytest.fixture
def saved_files(small_bpe: BPETokenizer, char_tok: CharTokenizer, tmp_path: Path) -> list[bytes]:
    return [tok.save(tmp_path / f"{tok.kind}.json").read_bytes() for tok in (small_bpe, char_tok)]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_damaged_files_fail_cleanly(
    data: st.DataObject, saved_files: list[bytes], tmp_path: Path
) -> None:
    """Any truncation or byte change either still loads or raises TokenizerFileError."""
    content = bytearray(data.draw(st.sampled_from(saved_files)))
    if data.draw(st.booleans()):
        content = content[: data.draw(st.integers(0, len(content) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            content[data.draw(st.integers(0, len(content) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path / "damaged.json"
    path.write_bytes(bytes(content))
    try:
        loaded = load_tokenizer(path)
    except TokenizerFileError:
        return
    except TokenizerError as exc:  # anything else is a bug in the loader's checks
        pytest.fail(f"raised {type(exc).__name__} instead of TokenizerFileError: {exc}")
    assert loaded.vocab_size == len(loaded.token_bytes())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_field_value_fails_cleanly(
    data: st.DataObject, small_bpe: BPETokenizer, char_tok: CharTokenizer
) -> None:
    """Any JSON value in any field either loads or raises TokenizerFileError, nothing else."""
    content = data.draw(st.sampled_from([small_bpe, char_tok])).to_dict()
    key = data.draw(st.sampled_from(sorted(content)))
    content[key] = data.draw(json_values)
    try:
        tokenizer_from_dict(content)
    except TokenizerFileError:
        pass
