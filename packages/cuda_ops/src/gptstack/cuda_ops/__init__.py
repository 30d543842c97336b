"""gptstack.cuda_ops: gptstack's own CPU and CUDA kernels, as torch.library custom ops.

    import gptstack.cuda_ops as ops
    y = ops.gelu_tanh(x)                 # also torch.ops.gptstack.gelu_tanh
    ops.build_info()                     # what was compiled: CPU paths, OpenMP, CUDA archs

Every op runs on CPU tensors (AVX2/FMA + OpenMP, or scalar) and, in a build with CUDA
kernels, on CUDA tensors (on the caller's current stream). Each is a `torch.library.custom_op`
in the `gptstack::` namespace with a fake kernel and an autograd formula. This file is the
whole public API; see README.md.
"""

from ._ext import _C
from .attention import causal_attention, gptstack_attention
from .bench import bench_candidates
from .cross_entropy import cross_entropy, linear_cross_entropy
from .decode import (
    decode_attention,
    decode_blocks,
    decode_linear,
    decode_tail,
    embedded_window_attention,
    window_attention,
    window_mlp,
)
from .decode_io import DecoderState, decode_advance, decode_embed, window_embed
from .errors import CudaOpsError, NotBuiltError, OpInputError, OpTypeError
from .gelu import gelu_tanh
from .layernorm import add_layernorm, layernorm
from .mlp import epilogues_unavailable, mlp_gelu
from .qkv import qkv_grad, qkv_heads
from .sampling import sample_tokens, sampler_state
from .switches import set_switch, switches


def build_info() -> dict:
    """What this build contains: `cpu_paths` (e.g. ["avx2_fma", "scalar"]), `cpu_path` (the
    one ops take now), `openmp` (version or None), `cxx_compiler`, `cuda` (bool), `cuda_archs`
    (e.g. ["sm_90a", "sm_80", "compute_80"]), `cuda_compiler`, `cuda_runtime`, `ops`."""
    return dict(_C.build_info())


def set_cpu_path(name: str) -> None:
    """Force the CPU path of every op: "auto" (default: AVX2/FMA when the CPU has it),
    "scalar" or "avx2". For tests and benchmarks; raises ValueError if unavailable."""
    _C.set_cpu_path(name)


__all__ = [
    "CudaOpsError",
    "DecoderState",
    "NotBuiltError",
    "OpInputError",
    "OpTypeError",
    "add_layernorm",
    "bench_candidates",
    "build_info",
    "causal_attention",
    "cross_entropy",
    "decode_advance",
    "decode_attention",
    "decode_blocks",
    "decode_embed",
    "decode_linear",
    "decode_tail",
    "embedded_window_attention",
    "epilogues_unavailable",
    "gelu_tanh",
    "gptstack_attention",
    "layernorm",
    "linear_cross_entropy",
    "mlp_gelu",
    "qkv_grad",
    "qkv_heads",
    "sample_tokens",
    "sampler_state",
    "set_cpu_path",
    "set_switch",
    "switches",
    "window_attention",
    "window_embed",
    "window_mlp",
]
