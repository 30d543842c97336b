"""Errors of the gptstack tools, and the tuple of every package's user-facing error.

The members install alone, so they share no common base class: each has one error base of its
own. The CLI catches `user_errors()` and prints one line instead of a traceback.
"""


class GptstackError(Exception):
    """A mistake in how the tools were called, or in their inputs (data, config, checkpoint)."""


class DataError(GptstackError):
    """A corpus is missing, empty, unreadable or has the wrong checksum."""


class ConfigError(GptstackError):
    """A preset, config file or --set override is invalid."""


class CheckpointError(GptstackError):
    """A checkpoint directory is missing, incomplete or inconsistent."""


def user_errors() -> tuple[type[BaseException], ...]:
    """Every package's user-facing error base. Imported when needed, not at module load, so
    `gptstack --help` does not pay for importing torch."""
    from gptstack.bench import BenchError
    from gptstack.model import ModelError
    from gptstack.quant import ArtifactError, QuantError
    from gptstack.tokenizer import TokenizerError

    return (GptstackError, TokenizerError, ModelError, ArtifactError, QuantError, BenchError)
