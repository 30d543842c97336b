"""Errors raised by gptstack.tokenizer.

Every user-facing problem is a `TokenizerError`; the gptstack CLI catches it and prints its one-line
message (which names the thing, the value and the fix) without a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path


class TokenizerError(Exception):
    """Base class of every error this package raises for a user mistake or bad input."""


class UnknownCharacterError(TokenizerError):
    """A char tokenizer was asked to encode a character that is not in its vocabulary.

    Attributes:
        character: the offending character.
        position: its index in the text passed to `encode`.
    """

    def __init__(self, character: str, position: int, vocab_size: int) -> None:
        self.character = character
        self.position = position
        super().__init__(
            f"character {character!r} (U+{ord(character):04X}) at position {position} is not in "
            f"this char tokenizer's vocabulary ({vocab_size} characters from its training text): "
            "remove or replace it in the input, or build the tokenizer from text that contains it"
        )


class TokenizerFileError(TokenizerError):
    """A tokenizer file is missing, malformed, of another format or version, or inconsistent.

    Attributes:
        path: the file.
        problem: what is wrong with it.
        fix: what to do about it.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str) -> None:
        self.path = Path(path)
        self.problem = problem
        self.fix = fix
        super().__init__(f"tokenizer file {self.path}: {problem}: {fix}")
