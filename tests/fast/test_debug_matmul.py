"""A bug planted in a matmul tile is named at the matmul node of the transformer graph (issue 28).

The conformance mutant "GEMM drops the edge rows" (conformance/mutants_opt.py) makes the matmul
kernels skip the last M % MR rows of each batch: with 37 tokens (a prime: no register tile divides
it, and more than gemm.MIN_ROWS, so the GEMM path is taken) the last token's row of every linear
layer is whatever the memory held. The first such kernel is the attention's query projection,
after the embedding's layer norm: compare must name the SUM of that matmul, not the layer norm or
anything later; both when the tolerance through the whole graph is built (conformance has a rule
for the layer norm's SQRT) and when it is not (the rule made to fail: compare then checks the
kernel on its own inputs, fast/debug/local.py). The mutant suspends the disk store of kernels.
(That compare raises no false alarm on the transformer without the bug: tests/fast/test_debug_models.py.)
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from example_modules import transformer

import fast
import fast.debug
import fast.xp
from conformance import mutants_opt
from fast.codegen import gemm

example = transformer()

CONFIG = example.Config(hidden=32, heads=4, layers=1)
TOKENS = 37
assert TOKENS > gemm.MIN_ROWS


def _embedding(weights: dict[str, np.ndarray]) -> Any:
    ids = np.random.default_rng(4).integers(0, 50, (1, TOKENS)).astype(np.int32)
    mask = np.ones((1, TOKENS), np.int32)
    mask[0, TOKENS - 4:] = 0  # padding
    with fast.debug.trace():
        w = {name: fast.xp.asarray(value, device="CLANG") for name, value in weights.items()}
        return example.encode(w, fast.xp.asarray(ids, device="CLANG"), fast.xp.asarray(mask, device="CLANG"),
                              CONFIG)


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    return example.random_weights(CONFIG, vocab=50, positions=TOKENS, seed=3)


@pytest.mark.parametrize("sqrt_rule", [True, False], ids=["through-the-graph", "on-the-kernels-inputs"])
def test_a_gemm_tile_bug_is_named_at_the_matmul(weights: dict[str, np.ndarray], sqrt_rule: bool,
                                                monkeypatch: Any) -> None:
    if not sqrt_rule:  # as before conformance had a rule for SQRT of an approximate value
        from conformance.program import Elementwise
        from conformance.tolerance import ToleranceBuilder
        build = ToleranceBuilder.build

        def failing(self: Any, step: Any, *args: Any) -> Any:
            if isinstance(step, Elementwise) and step.op == "SQRT":
                raise ValueError("no rule (planted)")
            return build(self, step, *args)
        monkeypatch.setattr(ToleranceBuilder, "build", failing)
    undo = mutants_opt.gemm_row_edge_dropped(fast)
    try:  # poisoned: the dropped row (a padding token's) reads NaN, not whatever the memory held before
        with fast.config.override(alloc_poison=True):  # (near-zero leftovers vanish behind the padding mask)
            out = _embedding(weights)
            wrong = np.asarray(out)
        report = fast.debug.compare(out)
    finally:
        undo()
    assert not np.allclose(wrong, example.encode(weights, *_inputs(), CONFIG), atol=1e-4)  # the bug shows
    first = report.first
    assert first is not None, str(report)
    assert first.op == "SUM" and first.code.endswith(".r(ReduceOps.SUM, (3,))"), str(report)
    assert first.shape == (1, TOKENS, CONFIG.hidden, 1) and not first.unfused and first.fused
    assert first.bad is not None and set(np.argwhere(first.bad)[:, 1]) == {TOKENS - 1}  # the dropped row
    assert first.kernel is not None and first.kernel.kind == "kernel" and not first.kernel_reads
    mul = report.nodes[first.index - 1]
    assert ".e(BinaryOps.MUL" in mul, mul  # the product the matmul sums
    assert ("kernel's inputs" in first.reason) != sqrt_rule


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    ids = np.random.default_rng(4).integers(0, 50, (1, TOKENS)).astype(np.int32)
    mask = np.ones((1, TOKENS), np.int32)
    mask[0, TOKENS - 4:] = 0
    return ids, mask
