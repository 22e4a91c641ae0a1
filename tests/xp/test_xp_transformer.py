"""examples/transformer.py in CI: small random weights saved with safe_save, loaded with safe_load, and the
same standard-only code run by numpy, by fast.xp (CLANG, LLVM) and by the namespace over reference."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import fast
import fast.xp
import reference

SPEC = importlib.util.spec_from_file_location("transformer_example",
                                              Path(__file__).parents[2] / "examples" / "transformer.py")
assert SPEC is not None and SPEC.loader is not None
example = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = example  # dataclasses look their module up while the class is built
SPEC.loader.exec_module(example)

CONFIG = example.Config(hidden=32, heads=4, layers=2)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    weights = example.random_weights(CONFIG, vocab=50, positions=16, seed=3)
    path = str(tmp_path_factory.mktemp("model") / "weights.safetensors")
    fast.safe_save(path, {k: fast.from_numpy(v, "CLANG") for k, v in weights.items()})
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 50, (3, 10)).astype(np.int32)
    mask = np.ones((3, 10), np.int32)
    mask[1, 6:] = 0
    return path, weights, ids, mask


def test_numpy_runs_the_example_on_the_saved_weights(model):
    path, weights, ids, mask = model
    loaded = example.load_numpy(path)
    assert sorted(loaded) == sorted(weights) and all(np.array_equal(loaded[k], weights[k]) for k in weights)
    out = example.encode(loaded, ids, mask, CONFIG)
    assert out.shape == (3, 32) and np.all(np.isfinite(out))
    padded = ids.copy()
    padded[1, 6:] = 0  # padding tokens are masked out of attention and pooling: their ids do not matter
    np.testing.assert_allclose(example.encode(loaded, padded, mask, CONFIG)[1], out[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["CLANG", "LLVM", "reference"])
def test_transformer_matches_numpy(model, target):
    path, _, ids, mask = model
    expected = example.encode(example.load_numpy(path), ids, mask, CONFIG)
    if target == "reference":
        xp, device = fast.xp.namespace_for(reference), "CLANG"
        weights = {k: xp.asarray(reference.to_numpy(v), device=device) for k, v in reference.safe_load(path).items()}
    else:
        xp, device = fast.xp, target
        weights = example.load(path, xp, device)
        assert all(w.device == device for w in weights.values())
    got = example.encode(weights, xp.asarray(ids, device=device), xp.asarray(mask, device=device), CONFIG)
    assert got.__array_namespace__() is xp
    np.testing.assert_allclose(np.asarray(got), expected, rtol=2e-5, atol=2e-5)


def test_the_embedding_gather_is_fused_into_the_first_layernorm(model):
    """`xp.take` of the token embeddings is a gathered load, not a host CUSTOM step: no CUSTOM item
    in the schedule, and the gather, the position and type adds and the embedding layernorm are one
    kernel whose indices are checked before it runs (engine/gathers.py)."""
    path, _, ids, mask = model
    weights = example.load(path, fast.xp, "CLANG")
    got = example.encode(weights, fast.xp.asarray(ids, device="CLANG"), fast.xp.asarray(mask, device="CLANG"), CONFIG)
    items = fast.schedule(got.lazy)
    assert [item for item in items if item.ast.op is fast.LoadOps.CUSTOM] == []
    gathering = [item for item in items if any(node.op is fast.ops.BufferOps.LOAD and node.src
                                               for node in item.ast.walk())]
    assert len(gathering) == 1
    assert sum(isinstance(node.op, fast.ReduceOps) for node in gathering[0].ast.walk()) == 2  # mean and variance
    assert [(check.count, check.size) for check in gathering[0].index_checks] == [(ids.size, 50)]
