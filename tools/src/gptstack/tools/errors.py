"""Errors of the gptstack tools, and the tuple of every package's user-facing error.

The members install alone, so they share no common base class: each has one error base of its
own. The CLI catches `user_errors()` and prints one line instead of a traceback.
"""

import sys


class GptstackError(Exception):
    """A mistake in how the tools were called, or in their inputs (data, config, checkpoint)."""


class DataError(GptstackError):
    """A corpus is missing, empty, unreadable or has the wrong checksum."""


class ConfigError(GptstackError):
    """A preset, config file or --set override is invalid."""


class CheckpointError(GptstackError):
    """A checkpoint directory is missing, incomplete or inconsistent."""


# Each package's user-facing error bases, by the light module that defines them.
_PACKAGE_ERRORS = (
    ("gptstack.tokenizer.errors", ("TokenizerError",)),
    ("gptstack.model.errors", ("ModelError",)),
    ("gptstack.quant.errors", ("ArtifactError", "QuantError")),
    ("gptstack.bench.errors", ("BenchError",)),
)


def user_errors() -> tuple[type[BaseException], ...]:
    """Every user-facing error base among the packages loaded so far.

    An error of a package that was never imported cannot have been raised, so nothing is
    imported here: a command that needs no torch (tokenizer commands, --help, a bad --set) never
    pays for it, not even on its error path (importing a package's `errors` module would still run
    the package's `__init__`, which for quant and tokenizer loads numpy or tiktoken)."""
    found: list[type[BaseException]] = [GptstackError]
    for module, names in _PACKAGE_ERRORS:
        loaded = sys.modules.get(module)
        if loaded is not None:
            found += [getattr(loaded, name) for name in names]
    return tuple(found)
