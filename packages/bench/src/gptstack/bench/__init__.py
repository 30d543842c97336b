"""gptstack.bench: timing harness, benchmark suites and report writer.

    from gptstack.bench import ModelShape, run_train, build_report
    run_train([ModelShape("esp32", 512, 64, 6, 8, 256, batch_size=64)], device="cuda",
              out="benchmarks/results/train-h200-....json")
    build_report("benchmarks/results", "benchmarks/README.md", "benchmarks/plots")

The harness (warm-up, CUDA events or graphs, alternated rounds, medians, paired ratios) is
`compare`; every suite writes one JSON per run (results.py); the report is generated from those
files only. Method and how to add an op: README.md. Rules: MEASURING.md.
"""

from .errors import BenchError
from .floors import measure_floors
from .harness import Comparison, Measurement, Progress, Settings, Variant, compare
from .opregistry import Op, OpSize, add_candidate, get_op, register_op, registered_ops
from .peaks import Peak, peak_flops
from .report import build_report, summarize_files, text_summary
from .results import SCHEMA, SUITES, Column, Result, load_result, result_path, validate_result
from .shapes import ModelShape
from .stats import median, paired_ratios, speedups, summarize
from .suites.attention import run_attention
from .suites.common import resolve_device
from .suites.engine import run_engine
from .suites.generate import run_generate
from .suites.ops import run_ops
from .suites.tokenizer import run_tokenizer
from .suites.train import RUNG_KEYS, RUNGS, run_train

__all__ = [
    "SCHEMA", "SUITES", "RUNGS", "RUNG_KEYS",
    # harness and statistics
    "BenchError", "Comparison", "Measurement", "Progress", "Settings", "Variant", "compare",
    "median", "paired_ratios", "speedups", "summarize", "measure_floors",
    # peaks and shapes
    "Peak", "peak_flops", "ModelShape",
    # op registry
    "Op", "OpSize", "add_candidate", "get_op", "register_op", "registered_ops",
    # results and report
    "Column", "Result", "load_result", "result_path", "validate_result", "build_report",
    "summarize_files", "text_summary",
    # suites
    "run_attention", "run_engine", "run_generate", "run_ops", "run_tokenizer", "run_train",
    "resolve_device",
]
