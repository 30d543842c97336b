"""Errors raised by gptstack.quant.

`ArtifactError` and its subclasses are the artifact reader's verdicts, one class per row of
FORMAT.md section 6 (the C loader returns the matching `GS_ERR_*` status). `QuantError` is for
bad inputs everywhere else: a checkpoint that does not match its config, a model that does not fit
its target, a prompt the tokenizer tables cannot encode. Every message names the thing, the value
found and the fix.
"""

from __future__ import annotations


class ArtifactError(Exception):
    """Base class: a `.gsm` artifact (or the data to write one) breaks FORMAT.md.

    `status` names the C engine's status code for the same failure (FORMAT.md section 6); None
    for failures outside the file (e.g. a path that cannot be read).
    """

    status: str | None = None


class TruncatedArtifactError(ArtifactError):
    """Fewer bytes than the header (step 1) or than `file_bytes` says (step 5): GS_ERR_TRUNCATED."""

    status = "GS_ERR_TRUNCATED"


class BadMagicError(ArtifactError):
    """The first four bytes are not "GSMF" (step 2): GS_ERR_MAGIC."""

    status = "GS_ERR_MAGIC"


class UnsupportedVersionError(ArtifactError):
    """The format version is not the one this package reads (step 3): GS_ERR_VERSION."""

    status = "GS_ERR_VERSION"


class BadHeaderError(ArtifactError):
    """header_bytes, reserved bytes, flags, trailing bytes or arena_bytes (steps 4, 6, 13)."""

    status = "GS_ERR_HEADER"


class BadCrcError(ArtifactError):
    """The CRC-32 over the file does not match its last four bytes (step 7): GS_ERR_CRC."""

    status = "GS_ERR_CRC"


class BadConfigError(ArtifactError):
    """A model config rule of FORMAT.md section 2 is broken (step 8): GS_ERR_CONFIG."""

    status = "GS_ERR_CONFIG"


class BadOffsetError(ArtifactError):
    """A section or tensor offset/size is misaligned or misplaced (steps 9, 12): GS_ERR_OFFSET."""

    status = "GS_ERR_OFFSET"


class BadTokenizerError(ArtifactError):
    """The tokenizer section breaks a rule of FORMAT.md section 3 (step 10): GS_ERR_TOKENIZER."""

    status = "GS_ERR_TOKENIZER"


class BadTensorError(ArtifactError):
    """The tensor table has a wrong name, order, dtype, shape or size (step 11): GS_ERR_TENSOR."""

    status = "GS_ERR_TENSOR"


class QuantError(Exception):
    """Bad input outside the artifact codec: checkpoint, memory budget, prompt, arguments."""


class UnknownCharacterError(QuantError):
    """Char tokenizer: a prompt character is not in the vocabulary (C: GS_ERR_UNKNOWN_CHAR)."""


class UnsupportedPatternError(QuantError):
    """Prompt encoding asked of a PATTERN_GPT4 tokenizer (C: GS_ERR_UNSUPPORTED, section 10)."""
