"""`gptstack bench ...`: run the benchmark suites of gptstack.bench and regenerate the report."""

from __future__ import annotations


def add_bench_parser(sub) -> None:
    sub.add_parser("bench", help="benchmark suites (train, generate, attention, ops, engine, tokenizer)")
