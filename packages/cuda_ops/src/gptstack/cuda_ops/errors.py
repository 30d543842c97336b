"""Errors raised by gptstack.cuda_ops.

`CudaOpsError` is the package's base (the CLI catches it). Bad arguments raise
`OpInputError` (a ValueError: wrong shape, device, contiguity) or `OpTypeError` (a TypeError:
wrong dtype or not a tensor), so callers can also catch the built-in classes. Each message names
the op, the argument, the value and the fix.
"""


class CudaOpsError(Exception):
    """A user-facing error from gptstack.cuda_ops."""


class OpInputError(CudaOpsError, ValueError):
    """An argument has the wrong shape, device or layout."""


class OpTypeError(CudaOpsError, TypeError):
    """An argument is not a tensor, or has a dtype the op does not take."""


class NotBuiltError(CudaOpsError, ImportError):
    """The compiled extension is missing, or was built without the CUDA kernels asked for."""
