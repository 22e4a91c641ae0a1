"""The benchmark suite: `python -m bench` times `fast` (CLANG, LLVM) against numpy, and torch / JAX
when they are importable, on elementwise, reduction, softmax, matmul, conv2d, layernorm and
graph-building workloads, and writes bench/results/<prefix>.{json,md,png}.

Modules: `workloads` (the registry), `graphs` (the lazy graphs), `peers` (numpy, torch, JAX),
`timing` (repeats within a budget), `runner` (one workload on one device or peer), `graph_build`,
`machine` (machine facts, memory bandwidth), `suite` (rows), `report` (table, Markdown, JSON, PNG),
`cli` (options and the run).
"""
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCHEMA = 1
