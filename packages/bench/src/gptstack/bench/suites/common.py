"""What every suite shares: its options, the device, the progress line and the result file.

options = SuiteOptions(device="cuda", out=path, smoke=False)   # the same for every suite
ctx = SuiteContext.create("train", params, options)
... ctx.result.add_row(...)
data = ctx.finish()
"""

from __future__ import annotations

import dataclasses
import gc
import os
from dataclasses import dataclass
from typing import Any

import torch

from gptstack.model import ModelError
from gptstack.model import resolve_device as resolve_model_device

from ..environment import environment
from ..errors import BenchError
from ..floors import measure_floors
from ..harness import Progress, Settings
from ..results import Result

# docs/MEASURING.md rule 5: relative error ||out - ref|| / ||ref|| against an fp32/fp64 reference.
TOLERANCES = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-3}
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")


def resolve_device(name: str | torch.device) -> torch.device:
    """'auto' (cuda if available), 'cuda' or 'cpu' (gptstack.model.resolve_device, the one
    resolver); BenchError if CUDA is asked for but absent."""
    try:
        return resolve_model_device(name)
    except ModelError as e:
        raise BenchError(str(e)) from None


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' is bf16 on a GPU and fp32 on a CPU."""
    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in table:
        raise BenchError(f"dtype {name!r} is unknown: use auto, fp32, bf16 or fp16")
    return table[name]


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
        dtype, str(dtype)
    )


def reference_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a reference output is computed in: float64 for fp32 runs, else float32."""
    return torch.float64 if dtype == torch.float32 else torch.float32


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| computed in float64."""
    out64, ref64 = out.detach().double(), ref.detach().double()
    denom = ref64.norm().item()
    return (out64 - ref64).norm().item() / (denom if denom > 0 else 1.0)


def check_close(out: Any, ref: Any, dtype: torch.dtype, against: str) -> dict:
    """{"rel_err", "tol", "ok", "against"}: docs/MEASURING.md rule 5's check of a fast path. out
    and ref are tensors or tuples of tensors (then rel_err is the worst element's)."""
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    tol = TOLERANCES.get(dtype, 1e-2)
    if len(outs) != len(refs):
        against = f"{against}: {len(outs)} results, {len(refs)} expected"
        return {"rel_err": float("inf"), "tol": tol, "ok": False, "against": against}
    err = max(relative_error(o, r) for o, r in zip(outs, refs, strict=True))
    return {"rel_err": err, "tol": tol, "ok": bool(err < tol), "against": against}


def check_compile_backend(backend: str) -> None:
    if backend not in COMPILE_BACKENDS:
        raise BenchError(
            f"compile backend {backend!r} is unknown: use {', '.join(COMPILE_BACKENDS)}"
        )


def compile_callable(fn: Any, backend: str, mode: str | None = None, **kwargs: Any) -> Any:
    """torch.compile with a backend choice (inductor for real runs; aot_eager/eager let CPU CI
    exercise Dynamo and AOTAutograd without minutes of C++ compilation). A mode applies to
    inductor only. Shapes are static (dynamic=False): a benchmark measures one size at a time,
    and a second size must not turn the compiled kernel into a dynamic-shape one."""
    kwargs.setdefault("dynamic", False)
    check_compile_backend(backend)
    if backend == "inductor":
        return torch.compile(fn, mode=mode, **kwargs)
    return torch.compile(fn, backend=backend, **kwargs)


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class SuiteOptions:
    """How every suite runs, whatever it measures: one object instead of the same keyword
    arguments on six functions.

    device: "auto", "cuda", "cpu" or a torch.device. settings: the harness settings (None: the
    defaults, or Settings.smoke() when smoke). out: the result JSON (None: not written).
    smoke: CI size (tiny models, a few repeats). compile_backend: torch.compile backend
    (inductor; aot_eager/eager let a CPU exercise the compile path quickly). progress: the
    progress line on stderr. command: the command line to record. notes: what the caller did
    to the process before the run (the CLI's malloc thresholds on a CPU), recorded among the
    result's notes.
    """

    device: str | torch.device = "auto"
    settings: Settings | None = None
    out: str | os.PathLike | None = None
    smoke: bool = False
    compile_backend: str = "inductor"
    progress: bool = True
    command: list[str] | None = None
    notes: tuple[str, ...] = ()

    def on_cpu(self) -> SuiteOptions:
        """The same options on the CPU (the engine and tokenizer suites)."""
        return dataclasses.replace(self, device="cpu")


@dataclass
class SuiteContext:
    """The device, settings, progress line and result of one suite run."""

    device: torch.device
    settings: Settings
    progress: Progress
    result: Result
    smoke: bool
    compile_backend: str

    @classmethod
    def create(
        cls, suite: str, params: dict[str, Any], options: SuiteOptions | None = None
    ) -> SuiteContext:
        o = options or SuiteOptions()
        dev = resolve_device(o.device)
        settings = o.settings or (Settings.smoke() if o.smoke else Settings())
        check_compile_backend(o.compile_backend)
        params = {**params, "smoke": o.smoke, "compile_backend": o.compile_backend}
        result = Result(
            suite,
            params=params,
            settings=settings.to_dict(),
            env=environment(dev, o.command),
            path=o.out,
        )
        for text in o.notes:
            result.note(text)
        return cls(
            dev, settings, Progress(suite, enabled=o.progress), result, o.smoke, o.compile_backend
        )

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def measure_floors(self) -> dict[str, Any]:
        """Measure the copy and matmul floors (floors.py), record them in the result (with a
        note when they could not be measured) and return them."""
        self.progress.row("floors: copy bandwidth and matmul rate")
        floors = measure_floors(self.device, self.settings, smoke=self.smoke)
        self.result.data["floors"] = floors
        if "error" in floors:
            self.result.note(f"floors could not be measured: {floors['error']}")
        return floors

    def finish(self) -> dict[str, Any]:
        self.progress.done()
        return self.result.finish()
