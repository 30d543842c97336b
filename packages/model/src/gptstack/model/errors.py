"""Errors raised by gptstack.model.

One base class, `ModelError`, so the CLI can catch every model mistake in one clause; the
messages name the thing, the value and the fix (docs/CONVENTIONS.md, "Errors").
"""


class ModelError(Exception):
    """A user-facing error from gptstack.model (bad input, bad file, unsupported mode)."""


class ModelConfigError(ModelError):
    """A `GPTConfig` field (or a config dict) is invalid."""
