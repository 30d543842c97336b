"""Device, precision, compile and thread choices for a run, resolved once from the config.

dtype "auto" is bf16 autocast on a CUDA GPU with bf16, and on a CPU that computes bf16 natively
(AVX512-BF16 or AMX: oneDNN's bf16 matmuls), fp32 elsewhere: on CPUs without it autocast
emulates bf16 and is slower than fp32. On the 2-core AVX512-BF16 development machine the esp32
training step ran 1.4-1.6x faster in bf16 (the bf16 autocast rung of
benchmarks/results/train-cpu-*.json).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from gptstack.bench.peaks import Peak, peak_flops
from gptstack.model import autocast, resolve_device

from .config import TrainSection
from .cpu_memory import MemoryNote
from .datasets import cache_dir
from .errors import ConfigError
from .schedule import total_steps
from .threads import ThreadChoice


@dataclass
class Runtime:
    device: torch.device
    dtype: str  # "bf16" (autocast) or "fp32"
    compile: str | None  # "regional" or "full" (gptstack.model.compile_model), None: eager
    peak: Peak | None  # for MFU; None on CPUs and unknown GPUs
    cuda_graph: bool = False  # the whole training step replayed as one CUDA graph
    threads: ThreadChoice | None = None  # CPU runs: the thread policy's choice (threads.py)
    memory: MemoryNote | None = None  # CPU training: what cpu_memory.py did to malloc

    @property
    def device_type(self) -> str:
        return self.device.type

    def autocast(self):
        return autocast(self.device, bf16=self.dtype == "bf16")

    def to_device(self, *arrays):
        """numpy batches -> device tensors. On CUDA through pinned memory: a copy from pageable
        memory makes the host wait for the GPU to drain its queue, so CPU and GPU would take
        turns instead of overlapping (CUDA runtime API, "API synchronization behavior")."""
        tensors = [torch.from_numpy(a) for a in arrays]
        if self.device.type == "cuda":
            return [t.pin_memory().to(self.device, non_blocking=True) for t in tensors]
        return tensors

    def describe(self) -> str:
        name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "CPU"
        extra = (f", torch.compile ({self.compile})" if self.compile else "") + (
            ", CUDA graph" if self.cuda_graph else ""
        )
        if self.threads is not None:
            extra += f", {self.threads.describe()}"
        if self.memory is not None:
            extra += f", {self.memory.describe()}"
        return f"{name} ({self.device}), {self.dtype}{extra}"


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX tiles)."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch without the probes
        return False


def auto_dtype(device: torch.device) -> str:
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def process_start_time() -> float:
    """When this process started (epoch seconds): the wall time a user waits counts Python's
    and torch's start-up too. Linux: /proc/self/stat's start time; elsewhere: now."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()


def use_compile_cache() -> None:
    """Keep Inductor's compiled kernels under gptstack's cache folder (unless the user chose
    a folder): a second run of the same preset then skips code generation and autotuning."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))


# On CUDA, runs of at least this many steps compile the whole model: it fuses across block
# boundaries, 5 % faster per step than regional compilation for esp32 on the H200 (1.79 vs
# 1.89 ms, `gptstack bench train`), which repays its longer compile over a long run. On a CPU
# compiling does not pay: esp32 trains at ~4,000 tokens/s on 2 cores either way, and the whole-
# model compile costs 73 s of start-up there.
FULL_COMPILE_MIN_STEPS = 20_000


def auto_compile(use_cuda: bool, max_steps: int) -> str | None:
    """train.compile = auto: full for long CUDA runs, regional for short ones, none on a CPU."""
    if not use_cuda:
        return None
    return "full" if max_steps >= FULL_COMPILE_MIN_STEPS else "regional"


def resolve_runtime(train: TrainSection) -> Runtime:
    device = resolve_device(train.device, "train.device =")
    use_cuda = device.type == "cuda"
    dtype = train.dtype if train.dtype != "auto" else auto_dtype(device)
    if dtype == "bf16" and use_cuda and not torch.cuda.is_bf16_supported():
        dtype = "fp32"
    compile_ = {
        "auto": auto_compile(use_cuda, total_steps(train, device.type)),
        "regional": "regional",
        "full": "full",
        "true": "full",
        "false": None,
    }[train.compile]
    if compile_:
        use_compile_cache()
    if train.cuda_graph == "true" and not use_cuda:
        raise ConfigError("train.cuda_graph = true needs a CUDA GPU; use train.cuda_graph=auto")
    graph = train.cuda_graph == "true" or (train.cuda_graph == "auto" and use_cuda)
    peak = None
    if use_cuda:
        # fp32 matmuls run as TF32 on tensor cores (allowed below), so that is their peak.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        peak = peak_flops(torch.cuda.get_device_name(device), "bf16" if dtype == "bf16" else "tf32")
    return Runtime(device, dtype, compile_, peak, graph)
