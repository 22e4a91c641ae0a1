"""Actions aimed at fast's optimization layer (docs/architecture.md, "Conformance"): programs whose
kernels take the vectorized, tiled, threaded, fused and replayed paths, so that random programs,
not only directed ones, check them against reference.

- `act_matmul`: `a @ b`, `a @ b.T` and batched products (float32 mostly; float64, float16 and int32
  too), sizes around the register tiles and GEMM's `MIN_ROWS` (1, primes, tile +/- 1), with or
  without an epilogue (bias, relu, scale, residual); data normal, or FMA stress values;
- `act_row_reduces`: softmax and layernorm shapes and pairs of reductions over one axis (int and
  float), rows around the vector widths; or a column reduction (walked in chunks of rows);
- `act_large`: one cheap elementwise op or row reduction over about a million elements (threads
  split it: even shares, uneven ones, fewer rows than chunks) or over 32,768-40,000 (vector tails);
- `act_replay`: one structure realized, then again with other constants, over another leaf, over a
  flipped view or with another shape of the same rank (schedule replay, constant parameters);
- `act_gather`: gathers with edge indices (0, n - 1, -1, -n).

Invariant, as everywhere in strategies/: every step is valid for its Info; leaves of more than a
few hundred elements carry seeded data (`random_data`, or `stress_data`, built from one drawn seed),
so large programs stay cheap to draw, shrink and print. Values a DIV divides by are positive or
NaN by construction (a softmax's sum holds exp2(0) = 1, a variance plus epsilon).
"""
from __future__ import annotations

import math

import numpy as np

from conformance.program import ArrayData, ConstLike, Elementwise, Fetch, Gather, Leaf, Movement, Reduce, Shape
from conformance.strategies.builder import Builder
from conformance.strategies.data import random_data
from conformance.vocab import DENORM_MIN, FLOATS, MAX_FINITE, TINY

#: Sizes around the vector widths (4, 8, 16 lanes) and register tiles: 1, primes, tile +/- 1.
EDGE_SIZES = (1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 33)
#: GEMM takes products with at least 32 rows (codegen/gemm.py MIN_ROWS): rows around it.
ROW_SIZES = (1, 5, 8, 16, 31, 32, 33, 37, 48, 64)
GEMM_ROWS = (32, 33, 37, 48, 64)
#: About a million iterations: threads split the first loop (1021 and 1031 are primes; 3 rows are
#: fewer than a launch's chunks), or 32,768-40,000 in one row (vector tails after a long body).
LARGE_SHAPES: tuple[Shape, ...] = ((1021, 1031), (1024, 1024), (3, 349_529), (2048, 512), (4099, 257),
                                   (512, 2048), (32_771,), (8, 4099))


def stress_values(dtype: str, size: int, seed: int, negative: bool = False) -> tuple[float, ...]:
    """Values that stress fused multiply-adds and their guard: magnitudes near sqrt(max) (products
    that overflow), near max, infinities, subnormals, among plain normal values. `negative`: every
    large magnitude is negative (a guard that checks one bound would let them through)."""
    big, tiny = MAX_FINITE[dtype], DENORM_MIN[dtype]
    root = math.sqrt(big)
    large = (root * 1.5, root * 0.75, root * 1.2, big, big / 2, math.inf)
    palette = (*(-v for v in large), *(() if negative else large), tiny, -tiny, TINY[dtype], 1.0, -1.0, 0.5, -3.0, 0.0)
    rng = np.random.default_rng(seed)
    plain = rng.standard_normal(size)
    picks = rng.integers(0, len(palette), size)
    use = rng.random(size) < (0.4 if negative else 0.3)
    np_type = np.dtype(dtype).type
    with np.errstate(all="ignore"):
        return tuple(float(np_type(palette[p] if u else v)) for p, u, v in zip(picks, use, plain, strict=True))


def stress_data(b: Builder, dtype: str, shape: Shape, negative: bool = False) -> ArrayData:
    """Explicit stress values (`stress_values`) for a float leaf, from one drawn seed."""
    return ArrayData(dtype, shape, stress_values(dtype, math.prod(shape), b.integer(0, 2 ** 16), negative))


def _data(b: Builder, dtype: str, shape: Shape, stress: str = "maybe") -> ArrayData:
    """Seeded normal data, or stress values: `stress` "maybe" (floats, a quarter of the time),
    "mixed" or "negative" (always, for floats of at most 2048 elements), "no"."""
    small_float = dtype in FLOATS and dtype != "float16" and math.prod(shape) <= 2048
    if small_float and (stress in ("mixed", "negative") or (stress == "maybe" and b.chance(0.25))):
        return stress_data(b, dtype, shape, negative=stress == "negative")
    return b.draw(random_data(dtype, shape))


def _leaf(b: Builder, dtype: str, shape: Shape, device: str, stress: str = "maybe") -> int:
    return b.add(Leaf(_data(b, dtype, shape, stress), device))


def _product(b: Builder, a: int, other: int, layout: str, sizes: tuple[int, int, int, int]) -> int:
    """The summed product of `a` (batch, m, k) and `other` ((batch, k, n), or (batch, n, k) for
    "abt"), reshaped to (batch, m, n) (batch 1: (m, n))."""
    batch, m, k, n = sizes
    if layout == "abt":  # reduce the last axis: both operands contiguous along k (a dot tile)
        left = b.add(Movement(b.add(Movement(a, "reshape", (batch, m, 1, k))), "expand", (batch, m, n, k)))
        right = b.add(Movement(b.add(Movement(other, "reshape", (batch, 1, n, k))), "expand", (batch, m, n, k)))
        axis = 3
    else:
        left = b.add(Movement(b.add(Movement(a, "reshape", (batch, m, k, 1))), "expand", (batch, m, k, n)))
        right = b.add(Movement(b.add(Movement(other, "reshape", (batch, 1, k, n))), "expand", (batch, m, k, n)))
        axis = 2
    summed = b.add(Reduce(b.add(Elementwise("MUL", (left, right))), "SUM", (axis,)))
    return b.add(Movement(summed, "reshape", (batch, m, n) if batch > 1 else (m, n)))


def _epilogue(b: Builder, out: int, dtype: str) -> int:
    """Elementwise work on a product's result (fused into the GEMM's tiles): bias, relu, scale, residual."""
    shape = b.info(out).shape
    kind = b.choose(("none", "bias", "relu", "scale", "residual"))
    if kind == "bias":
        bias = _leaf(b, dtype, (shape[-1],), b.info(out).device)
        lifted = b.add(Movement(b.add(Movement(bias, "reshape", (1,) * (len(shape) - 1) + (shape[-1],))),
                                "expand", shape))
        return b.add(Elementwise("ADD", (out, lifted)))
    if kind == "relu":
        return b.add(Elementwise("MAX", (out, b.add(ConstLike(out, 0)))))
    if kind == "scale":
        return b.add(Elementwise("MUL", (out, b.add(ConstLike(out, b.choose((0.5, -3, 0.125)))))))
    if kind == "residual":
        return b.add(Elementwise("ADD", (out, _leaf(b, dtype, shape, b.info(out).device))))
    return out


def _matmul_sizes(b: Builder, layout: str) -> tuple[str, int, int, int]:
    """(dtype, m, k, n) aimed at one path: GEMM (at least `MIN_ROWS` rows, tile edges or none), the
    plain register and dot tiles (sizes that divide them), any size (1 and primes), or a GEMM large
    enough that threads share its units of rows."""
    target = b.choose(("gemm", "tile", "any", "gemm", "tile"))
    if b.chance(0.04):
        return "float32", b.choose((128, 131)), 64, 128
    if target == "gemm":
        return b.choose(("float32", "float32", "float64")), b.choose(GEMM_ROWS), b.choose((4, 5, 16, 17)), \
            b.choose((4, 7, 8, 9, 16, 17, 33))
    if target == "tile":
        return "float32", b.choose((4, 8, 16)), b.choose((8, 16, 32) if layout == "abt" else (3, 8, 128)), \
            b.choose((4, 8, 16))
    return b.choose(("float32", "int32", "float16", "float64")), b.choose(ROW_SIZES), b.choose(EDGE_SIZES), \
        b.choose(EDGE_SIZES)


def act_matmul(b: Builder) -> bool:
    """A matmul-shaped product in one of three layouts, maybe with an epilogue, fetched."""
    layout = b.choose(("ab", "abt", "batched"))
    dtype, m, k, n = _matmul_sizes(b, layout)
    batch = b.choose((2, 3)) if layout == "batched" else 1
    device = b.device()
    stress = b.choose(("no", "no", "mixed", "negative"))  # both operands alike: a tile sees both
    a = _leaf(b, dtype, (batch, m, k) if batch > 1 else (m, k), device, stress)
    other_shape = (n, k) if layout == "abt" else (k, n)
    other = _leaf(b, dtype, (batch, *other_shape) if batch > 1 else other_shape, device, stress)
    out = _product(b, a, other, layout, (batch, m, k, n))
    b.add(Fetch(_epilogue(b, out, dtype)))
    return True


def _expand_back(b: Builder, reduced: int, shape: Shape) -> int:
    return b.add(Movement(reduced, "expand", shape))


def act_row_reduces(b: Builder) -> bool:
    """Several reductions over the last axis with elementwise work between them (one row kernel in
    fast): softmax, layernorm, or a SUM and a MAX of the same rows combined; int or float."""
    dtype = b.choose(("float32", "int32", "float16", "float64", "int16"))
    shape = (b.choose(ROW_SIZES[:6]), b.choose(EDGE_SIZES))
    x = _leaf(b, dtype, shape, b.device())
    axis = (1,)
    kind = b.choose(("softmax", "layernorm", "pair", "columns"))
    if kind == "columns":  # a column reduction: the reduce axis walked in chunks of rows
        x = _leaf(b, dtype, (b.choose((32, 64, 33)), shape[1]), b.info(x).device)
        out = b.add(Reduce(x, b.choose(("SUM", "MAX")), (0,)))
    elif kind == "pair":
        pair = (b.add(Reduce(x, "SUM", axis)), b.add(Reduce(x, "MAX", axis)))
        out = b.add(Elementwise(b.choose(("ADD", "MAX")), pair))
    elif kind == "softmax":
        shifted = b.add(Elementwise("SUB", (x, _expand_back(b, b.add(Reduce(x, "MAX", axis)), shape))))
        if dtype in FLOATS:
            shifted = b.add(Elementwise("EXP2", (shifted,)))
        total = _expand_back(b, b.add(Reduce(shifted, "SUM", axis)), shape)
        out = b.add(Elementwise("DIV" if dtype in FLOATS else "SUB", (shifted, total)))
    else:
        scale = b.add(ConstLike(x, 1.0 / shape[1] if dtype in FLOATS else 3))
        mean = b.add(Elementwise("MUL", (_expand_back(b, b.add(Reduce(x, "SUM", axis)), shape), scale)))
        centered = b.add(Elementwise("SUB", (x, mean)))
        spread = b.add(Reduce(b.add(Elementwise("MUL", (centered, centered))), "SUM", axis))
        if dtype in FLOATS:
            spread = b.add(Elementwise("SQRT", (b.add(Elementwise("ADD", (spread, b.add(ConstLike(spread, 1e-3))))),)))
            out = b.add(Elementwise("DIV", (centered, _expand_back(b, spread, shape))))
        else:
            out = b.add(Elementwise("ADD", (centered, _expand_back(b, spread, shape))))
    b.add(Fetch(out))
    return True


def act_large(b: Builder) -> bool:
    """One exact elementwise op or a row reduction over a large leaf (simple seeded values)."""
    shape = b.choose(LARGE_SHAPES)
    dtype = b.choose(("float32", "int32", "int8", "float64", "uint16"))
    x = b.leaf(dtype, shape, b.device(), data=b.draw(random_data(dtype, shape)))
    if b.chance(0.3):
        out = b.add(Reduce(x, b.choose(("SUM", "MAX")), (len(shape) - 1,)))
    else:
        y = b.leaf(dtype, shape, b.info(x).device, data=b.draw(random_data(dtype, shape)))
        out = b.add(Elementwise(b.choose(("ADD", "MAX", "CMPLT")), (x, y)))
    b.add(Fetch(out))
    return True


def _structure(b: Builder, x: int, recipe: tuple[str, ...], constants: tuple[float, float]) -> int:
    """`recipe` applied to `x`: (x * c0 + c1), then an optional op and reduce over the last axis."""
    scaled = b.add(Elementwise("MUL", (x, b.add(ConstLike(x, constants[0])))))
    value = b.add(Elementwise("ADD", (scaled, b.add(ConstLike(x, constants[1])))))
    for step in recipe:
        if step in ("SUM", "MAX"):
            value = b.add(Reduce(value, step, (len(b.info(value).shape) - 1,)))
        else:
            value = b.add(Elementwise(step, (value, x)))
    return value


def act_replay(b: Builder) -> bool:
    """One structure realized, then realized again over other inputs: other constants (the kernel
    takes them as parameters), a new leaf, a flipped view of one, or another shape of the same rank."""
    dtype = b.choose(("float32", "int32", "float64"))
    shape = (b.choose(EDGE_SIZES[1:]), b.choose(EDGE_SIZES[1:]))
    recipe = b.choose(((), ("MAX",), ("SUM",), ("ADD", "MAX"), ("MUL",)))
    device = b.device()

    def constants() -> tuple[float, float]:
        first = b.choose((2, 3, -1, 5, 7))
        second = b.choose([c for c in (0.5, -4, 9, 1, -2) if c != first])
        return (float(first), float(second)) if dtype in FLOATS else (first, int(second))  # type: ignore[return-value]
    b.add(Fetch(_structure(b, _leaf(b, dtype, shape, device), recipe, constants())))
    for _ in range(b.integer(1, 3)):
        variant = b.choose(("constants", "leaf", "flipped", "shape"))
        other_shape = (b.choose(EDGE_SIZES[1:]), shape[1]) if variant == "shape" else shape
        x = _leaf(b, dtype, other_shape, device)
        if variant == "flipped":
            x = b.add(Movement(x, "stride", (-1, 1) if b.chance(0.5) else (1, -1)))
        b.add(Fetch(_structure(b, x, recipe, constants() if variant == "constants" or b.chance(0.5) else
                                 (2.0, 0.5) if dtype in FLOATS else (2, 1))))  # type: ignore[arg-type]
    return True


def act_gather(b: Builder) -> bool:
    """`x.gather(indices, axis)` with edge indices (0, n - 1, -1, -n and a middle one), maybe fed
    into an elementwise op."""
    dtype = b.choose(("float32", "int16", "float16", "int64"))
    shape = (b.choose(EDGE_SIZES[1:8]), b.choose(EDGE_SIZES[1:8]))
    device = b.device()
    x = _leaf(b, dtype, shape, device)
    axis = b.integer(0, 1)
    size = shape[axis]
    edges = (0, size - 1, -1, -size, size // 2)
    count = b.integer(1, 9)
    values = tuple(edges[b.integer(0, len(edges) - 1)] for _ in range(count))
    index_dtype = b.choose(("int32", "int64"))
    indices = b.add(Leaf(ArrayData(index_dtype, (count,), values), device))
    out = b.add(Gather(x, indices, axis))
    if b.chance(0.5):
        out = b.add(Elementwise("ADD", (out, out)))
    b.add(Fetch(out))
    return True
