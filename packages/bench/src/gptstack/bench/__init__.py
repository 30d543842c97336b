"""gptstack.bench: timing harness, benchmark suites and report writer.

    from gptstack.bench import ModelShape, SuiteOptions, run_train, build_report
    run_train([ModelShape("esp32", 512, 64, 6, 8, 256, batch_size=64)],
              options=SuiteOptions(device="cuda", out="benchmarks/results/train-h200-....json"))
    build_report("benchmarks/results", "benchmarks/README.md", "benchmarks/plots")

The harness (warm-up, CUDA events or graphs, alternated rounds, medians, paired ratios) is
`compare`; every suite writes one JSON per run (results.py); the report is generated from those
files only. Method and how to add an op: README.md. Rules: docs/MEASURING.md.

Names load on first use (PEP 562): `import gptstack.bench` and `gptstack.bench.peaks` (the GPU
peak table training uses for MFU) stay cheap, and a suite's imports (torch.compile helpers,
matplotlib, the engine) are paid only by the suite that runs.
"""

from importlib import import_module
from typing import Any

# public name -> module (relative to this package) that defines it
_EXPORTS = {
    "BenchError": ".errors",
    "measure_floors": ".floors",
    "Comparison": ".harness",
    "Measurement": ".harness",
    "Progress": ".harness",
    "Settings": ".harness",
    "Variant": ".harness",
    "compare": ".harness",
    "Op": ".opregistry",
    "OpSize": ".opregistry",
    "add_candidate": ".opregistry",
    "get_op": ".opregistry",
    "register_op": ".opregistry",
    "registered_ops": ".opregistry",
    "Peak": ".peaks",
    "peak_flops": ".peaks",
    "build_report": ".report",
    "summarize_files": ".report",
    "text_summary": ".report",
    "SCHEMA": ".results",
    "SUITES": ".results",
    "Column": ".results",
    "Result": ".results",
    "load_result": ".results",
    "result_path": ".results",
    "validate_result": ".results",
    "ModelShape": ".shapes",
    "median": ".stats",
    "paired_ratios": ".stats",
    "speedups": ".stats",
    "summarize": ".stats",
    "SuiteOptions": ".suites.common",
    "resolve_device": ".suites.common",
    "run_attention": ".suites.attention",
    "run_engine": ".suites.engine",
    "run_generate": ".suites.generate",
    "run_ops": ".suites.ops",
    "run_tokenizer": ".suites.tokenizer",
    "RUNGS": ".suites.train",
    "RUNG_KEYS": ".suites.train",
    "run_train": ".suites.train",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gptstack.bench' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
