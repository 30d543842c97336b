"""The benchmark suites, one module per question (see packages/bench/README.md)."""
