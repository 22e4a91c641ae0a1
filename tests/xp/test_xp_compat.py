"""The front end through `array_api_compat` (a function written only against the standard runs on numpy,
fast and reference alike), and fusion: the standard's spelling of softmax(x @ w + b) schedules no more
kernels than the same graph built with the LazyBuffer API."""
from __future__ import annotations

import math
from pathlib import Path

import array_api_compat
import numpy as np
import pytest

import fast
import fast.xp
import reference
from fast import BinaryOps, LazyBuffer, ReduceOps, UnaryOps
from fast.ops import KernelOps
from tests.xp.conftest import make_target, to_np

RNG = np.random.default_rng(3)


def standardized_scores(x, w):
    """Written only against the standard: any conforming array works."""
    xp = array_api_compat.array_namespace(x, w)
    centered = x - xp.mean(x, axis=0, keepdims=True)
    z = centered / (xp.std(x, axis=0, keepdims=True) + 1e-3)
    logits = xp.matmul(z, w)
    shifted = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))
    probs = shifted / xp.sum(shifted, axis=-1, keepdims=True)
    return xp.argmax(probs, axis=-1), xp.where(probs > 0.2, probs, xp.zeros_like(probs))


@pytest.mark.parametrize("target", ["fast-CLANG", "fast-LLVM", "reference"])
def test_array_api_compat_namespace_and_values(target):
    t = make_target(target)
    x, w = RNG.standard_normal((6, 4)).astype(np.float32), RNG.standard_normal((4, 3)).astype(np.float32)
    ax, aw = t.asarray(x), t.asarray(w)
    assert array_api_compat.array_namespace(ax, aw) is t.xp
    assert array_api_compat.is_array_api_obj(ax) and array_api_compat.device(ax) == t.device
    assert array_api_compat.size(ax) == 24
    expected_idx, expected_probs = standardized_scores(x, w)
    got_idx, got_probs = standardized_scores(ax, aw)
    np.testing.assert_array_equal(to_np(got_idx), expected_idx)
    np.testing.assert_allclose(to_np(got_probs), expected_probs, rtol=1e-4, atol=1e-6)


def test_namespaces_do_not_mix():
    a = fast.xp.asarray([1.0])
    b = fast.xp.namespace_for(reference).asarray([1.0])
    with pytest.raises(TypeError, match="namespace"):
        a + b
    with pytest.raises(TypeError, match="Multiple namespaces"):
        array_api_compat.array_namespace(a, b)


def kernels(out: LazyBuffer) -> int:
    return sum(item.ast.op is KernelOps.SINK for item in fast.schedule(out))


def lazybuffer_softmax_linear(x: LazyBuffer, w: LazyBuffer, b: LazyBuffer) -> LazyBuffer:
    """softmax(x @ w + b) written with the LazyBuffer API (matmul as in bench/graphs.py)."""
    (m, k), n = x.shape, w.shape[1]
    full = (m, n, k)
    product = x.reshape((m, 1, k)).expand(full).e(BinaryOps.MUL, w.permute((1, 0)).reshape((1, n, k)).expand(full))
    logits = product.r(ReduceOps.SUM, (2,)).reshape((m, n)).e(BinaryOps.ADD, b.reshape((1, n)).expand((m, n)))
    shifted = logits.e(BinaryOps.SUB, logits.r(ReduceOps.MAX, (1,)).expand((m, n)))
    exp = shifted.e(BinaryOps.MUL, shifted.const(1 / math.log(2))).e(UnaryOps.EXP2)
    return exp.e(BinaryOps.DIV, exp.r(ReduceOps.SUM, (1,)).expand((m, n)))


def xp_softmax_linear(x, w, b):
    xp = x.__array_namespace__()
    logits = x @ w + b
    e = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_fusion_is_preserved(device):
    xp = fast.xp
    x, w, b = (RNG.standard_normal(s).astype(np.float32) for s in ((16, 32), (32, 10), (10,)))
    lazy = lazybuffer_softmax_linear(*(fast.from_numpy(a, device) for a in (x, w, b)))
    front = xp_softmax_linear(*(xp.asarray(a, device=device) for a in (x, w, b)))
    assert kernels(front.lazy) <= kernels(lazy)
    logits = x.astype(np.float64) @ w + b
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_np(front), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast.to_numpy(lazy), expected, rtol=1e-5, atol=1e-6)


def test_elementwise_chain_is_one_kernel():
    xp = fast.xp
    x = xp.asarray(RNG.standard_normal((8, 8)).astype(np.float32))
    y = xp.tanh(x * 2.0 + 1.0) - xp.abs(x) / 3.0
    assert kernels(y.lazy) == 1


def test_front_end_uses_only_the_public_lazybuffer_api_and_reference_stays_free_of_fast():
    """The front end imports nothing of fast but fast.xp (the backend is passed in), and importing
    reference loads no fast module."""
    import ast
    import subprocess
    import sys

    for path in (p for p in Path(fast.xp.__file__).parent.glob("_*.py") if p.name != "__init__.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("fast") or node.module.startswith("fast.xp"), (path, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("fast") for a in node.names), path
    code = "import reference, sys; print(sorted(m for m in sys.modules if m == 'fast' or m.startswith('fast.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
