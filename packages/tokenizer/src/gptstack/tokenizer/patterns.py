"""Pre-tokenization regular expressions, by name.

Byte-level BPE never merges across the pieces these patterns cut text into (words with their
leading space, runs of digits, runs of punctuation, runs of whitespace). The trainer splits with
the `regex` module and encoding goes through tiktoken (Rust `fancy-regex`); both read the same
pattern string.
"""

from __future__ import annotations

from .errors import TokenizerError

# GPT-2's pattern (openai/gpt-2 src/encoder.py), in tiktoken's equivalent possessive form
# (tiktoken_ext/openai_public.py, `r50k_pat_str`): contractions, letters, digits, other symbols,
# each with an optional leading space, then whitespace.
GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
)

# GPT-4's pattern (tiktoken's cl100k_base): case-insensitive contractions, digits in groups of at
# most three, punctuation keeps its trailing newlines.
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

PATTERNS: dict[str, str] = {"gpt2": GPT2_PATTERN, "gpt4": GPT4_PATTERN}


def pattern_regex(name: str) -> str:
    """Return the regular expression of the pre-tokenization pattern called `name`.

    Raises:
        TokenizerError: `name` is not one of `PATTERNS`.
    """
    try:
        return PATTERNS[name]
    except (KeyError, TypeError):
        choices = ", ".join(repr(n) for n in PATTERNS)
        raise TokenizerError(
            f"unknown pre-tokenization pattern {name!r}: use one of {choices}"
        ) from None
