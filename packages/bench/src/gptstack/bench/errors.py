"""The one error base of gptstack.bench: a benchmark asked for something it cannot do."""


class BenchError(Exception):
    """A bad suite parameter, a missing input (data file, artifact, engine binary) or a result
    file that fails its schema check. The message names the thing, the value and the fix."""
