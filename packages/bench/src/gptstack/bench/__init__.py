"""gptstack.bench: timing harness, suites and report writer."""

from .peaks import Peak, peak_flops

__all__ = ["Peak", "peak_flops"]
