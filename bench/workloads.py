"""The registry of workloads: sizes (full and `--quick`), inputs, the `fast` graph, the peer function,
the correctness tolerance, and what throughput means for each (bytes moved or floating-point ops).

Inputs are float32 in modest ranges (nothing overflows); sums read values in [0, 1) so that the
result does not cancel and a relative tolerance is meaningful.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench import graphs, take
from bench.peers import ArrayOps

QUICK_DIV = 8  # --quick divides each side of a matrix by this (elements by 64) and vectors by 64


@dataclass(frozen=True)
class Workload:
    """One benchmark. `build(*lazy_inputs)` is the fast graph, `peer(ops, *arrays)` the peers' version.

    `kind` is "compute" (timed on every device against the peers) or "graph_build" (build and
    schedule only) or "const_realizes" (bench/const_realizes.py: compiles and memory when only a
    constant changes) or "safetensors_read" (bench/safetensors_read.py: one small tensor vs a full read
    out of a large file on DISK) or "sharded" (a compute workload timed sharded over two devices of each
    device's kind against that device alone, bench/sharded.py) or "mpi_sharded" (the same over two MPI
    ranks against one process, bench/mpi_sharded.py) or "contention" (default threads against one thread
    on a host kept busy by other processes, bench/contention.py) or "minilm" (a real model against numpy,
    torch and onnxruntime, bench/minilm.py; `make_inputs` gives its (batch, tokens)). Memory-bound
    workloads report GB/s (inputs read once + output written once, or `moved(inputs, out_shape)` bytes
    when given: a gather reads only the rows it selects); the others report GFLOP/s from
    `flops(inputs)`. `group` names a set that `--only` selects at once ("matmul", "minilm").
    """

    name: str
    description: str
    make_inputs: Callable[[np.random.Generator, bool], list[np.ndarray]]
    build: Callable[..., Any] | None = None
    peer: Callable[..., Any] | None = None
    rtol: float = 1e-3
    atol: float = 0.0
    memory_bound: bool = True
    flops: Callable[[list[np.ndarray]], float] | None = None
    slow: bool = False
    kind: str = "compute"
    group: str = ""
    moved: Callable[[list[np.ndarray], tuple[int, ...]], int] | None = None  # bytes, when not all inputs


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    return rng.uniform(low, high, size=shape).astype(np.float32)


def _vector(quick: bool) -> int:
    return (1 << 24) // (64 if quick else 1)


def _side(full: int, quick: bool) -> int:
    return full // QUICK_DIV if quick else full


def _elementwise_inputs(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
    return [_uniform(rng, (_vector(quick),), -1.0, 1.0) for _ in range(3)]


def _vector_inputs(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
    return [_uniform(rng, (_vector(quick),), 0.0, 1.0)]


def _positive_vectors(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
    return [_uniform(rng, (_vector(quick),), 0.0, 1.0) for _ in range(3)]


def _positive_matrix(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
    side = _side(4096, quick)
    return [_uniform(rng, (side, side), 0.0, 1.0)]


def _normal_matrix(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
    side = _side(4096, quick)
    return [rng.standard_normal((side, side), dtype=np.float32)]


def _matmul_inputs(n: int) -> Callable[[np.random.Generator, bool], list[np.ndarray]]:
    def make(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
        side = _side(n, quick)
        return [_uniform(rng, (side, side), -1.0, 1.0) for _ in range(2)]
    return make


def _conv_inputs(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
    batch, channels, size = (2, 8, 14) if quick else (8, 64, 56)
    return [_uniform(rng, (batch, channels, size, size), -1.0, 1.0),
            _uniform(rng, (channels, channels, 3, 3), -1.0, 1.0)]


def _graph_inputs(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
    return [_uniform(rng, (4, 4), 0.5, 1.0)]


def _matmul_flops(inputs: list[np.ndarray]) -> float:
    (m, k), (_, n) = inputs[0].shape, inputs[1].shape
    return 2.0 * m * n * k


def _conv_flops(inputs: list[np.ndarray]) -> float:
    (n, cin, h, w), (cout, _, k, _) = inputs[0].shape, inputs[1].shape
    return 2.0 * n * cout * cin * k * k * h * w  # padding 1, stride 1: output is h x w


def _elementwise_peer(ops: ArrayOps, a: Any, b: Any, c: Any) -> Any:
    return ops.exp(a * b + c) * 0.5 + a - b * c


def _softmax_peer(ops: ArrayOps, x: Any) -> Any:
    numerator = ops.exp(x - ops.max(x, 1))
    return numerator / ops.sum(numerator, 1)


def _layernorm_peer(ops: ArrayOps, x: Any) -> Any:
    inv_n = 1.0 / x.shape[1]
    centered = x - ops.sum(x, 1) * inv_n
    return centered / ops.sqrt(ops.sum(centered * centered, 1) * inv_n + 1e-5)


def _matmul(n: int) -> Workload:
    return Workload(f"matmul_{n}", f"{n}x{n} @ {n}x{n} as expand-multiply-sum", _matmul_inputs(n),
                    graphs.matmul, lambda ops, a, b: ops.matmul(a, b), rtol=1e-3, atol=1e-3,
                    memory_bound=False, flops=_matmul_flops, slow=n >= 2048, group="matmul")


def _product_flops(transpose_b: bool) -> Callable[[list[np.ndarray]], float]:
    """2 flops per multiply-add of a (..., M, K) @ b (..., K, N), or @ b.T with b (..., N, K)."""
    def flops(inputs: list[np.ndarray]) -> float:
        a, b = inputs
        return 2.0 * a.size * b.shape[-2 if transpose_b else -1]
    return flops


def _shaped_inputs(*shapes: tuple[int, ...]) -> Callable[[np.random.Generator, bool], list[np.ndarray]]:
    """Uniform(-1, 1) inputs of these shapes; --quick divides every input's first axis by QUICK_DIV
    (rows of a and of b stored (N, K), or the batch), which keeps K and the shapes compatible."""
    def make(rng: np.random.Generator, quick: bool) -> list[np.ndarray]:
        return [_uniform(rng, (_side(shape[0], quick), *shape[1:]), -1.0, 1.0) for shape in shapes]
    return make


def _product(name: str, description: str, shapes: tuple[tuple[int, ...], ...], transpose_b: bool,
             slow: bool = False, transpose_a: bool = False) -> Workload:
    """A matmul-shaped workload: a @ b, or a @ b.T (b.mT when batched) with b stored transposed, or
    a.T @ b with a stored transposed (`transpose_a`: a stored (K, M))."""
    if transpose_a:
        build, peer = graphs.matmul_at, (lambda ops, a, b: ops.matmul(ops.mT(a), b))
    elif transpose_b:
        build, peer = graphs.matmul_bt, (lambda ops, a, b: ops.matmul(a, ops.mT(b)))
    else:
        build, peer = graphs.batched_matmul, (lambda ops, a, b: ops.matmul(a, b))
    k = shapes[0][-2 if transpose_a else -1]
    return Workload(name, description, _shaped_inputs(*shapes), build, peer, rtol=1e-3, atol=1e-3 * max(1.0, k / 512),
                    memory_bound=False, flops=_product_flops(transpose_b), slow=slow, group="matmul")


def _matmul_bt(n: int) -> Workload:
    return _product(f"matmul_bt_{n}", f"a @ b.T, {n}x{n} each, b stored (N, K) as a linear layer's weight",
                    ((n, n), (n, n)), transpose_b=True, slow=n >= 2048)


def _minilm_size(batch: int, tokens: int, quick: tuple[int, int]) -> Callable[..., list[np.ndarray]]:
    """The (batch, tokens) of a minilm workload (the sentences are bench/minilm_model.py's)."""
    def make(rng: np.random.Generator, is_quick: bool) -> list[np.ndarray]:
        return [np.array(quick if is_quick else (batch, tokens))]
    return make


MATMUL_WORKLOADS: tuple[Workload, ...] = (
    _matmul_bt(512), _matmul_bt(1024), _matmul_bt(2048),
    _product("matmul_at_1024", "a.T @ b, 1024x1024 each, a stored (K, M) as a gradient's activations (x.T @ dy)",
             ((1024, 1024), (1024, 1024)), transpose_b=False, transpose_a=True),
    _product("linear_up", "MiniLM's 384 -> 1536 linear x @ W.T: (4096, 384) @ (1536, 384).T (32 x 128 tokens)",
             ((4096, 384), (1536, 384)), transpose_b=True),
    _product("linear_down", "MiniLM's 1536 -> 384 linear x @ W.T: (4096, 1536) @ (384, 1536).T",
             ((4096, 1536), (384, 1536)), transpose_b=True),
    _product("attn_scores", "attention q @ k.mT: (32, 12, 128, 32) @ (32, 12, 32, 128), k stored (32, 12, 128, 32)",
             ((32, 12, 128, 32), (32, 12, 128, 32)), transpose_b=True),
    _product("attn_context", "attention p @ v: (32, 12, 128, 128) @ (32, 12, 128, 32)",
             ((32, 12, 128, 128), (32, 12, 128, 32)), transpose_b=False),
)

MINILM_WORKLOADS: tuple[Workload, ...] = (
    Workload("minilm_32x128", "all-MiniLM-L6-v2 (examples/transformer.py) on 32 real sentences padded to 128 "
             "tokens vs numpy, torch eager, torch.compile, onnxruntime", _minilm_size(32, 128, (2, 16)),
             memory_bound=False, kind="minilm", group="minilm", slow=True),
    Workload("minilm_1x16", "all-MiniLM-L6-v2 on 1 sentence of 16 tokens (latency) vs the same peers",
             _minilm_size(1, 16, (1, 8)), memory_bound=False, kind="minilm", group="minilm"),
)


WORKLOADS: tuple[Workload, ...] = (
    Workload("elementwise", "exp(a*b+c)*0.5 + a - b*c, 8 ops over three 16M vectors", _elementwise_inputs,
             graphs.elementwise_chain, _elementwise_peer, rtol=1e-4, atol=1e-5),
    Workload("sum", "sum of 16M", _vector_inputs, graphs.total_sum, lambda ops, x: ops.sum(x)),
    Workload("row_sum", "row sums of 4096x4096 (axis 1)", _positive_matrix,
             lambda x: graphs.axis_sum(x, 1), lambda ops, x: ops.sum(x, 1)),
    Workload("col_sum", "column sums of 4096x4096 (axis 0)", _positive_matrix,
             lambda x: graphs.axis_sum(x, 0), lambda ops, x: ops.sum(x, 0)),
    Workload("softmax", "row softmax of 4096x4096", _normal_matrix, graphs.softmax, _softmax_peer,
             rtol=1e-3, atol=1e-7),
    _matmul(512),
    _matmul(1024),
    _matmul(2048),
    *MATMUL_WORKLOADS,
    Workload("conv2d", "8x64x56x56 * 64x64x3x3, padding 1", _conv_inputs,
             lambda x, w: graphs.conv2d(x, w, 1), lambda ops, x, w: ops.conv2d(x, w, 1),
             rtol=1e-3, atol=1e-3, memory_bound=False, flops=_conv_flops),
    Workload("layernorm", "layernorm over the rows of 4096x4096", _normal_matrix, graphs.layernorm,
             _layernorm_peer, rtol=1e-3, atol=1e-4),
    Workload("take", f"take of {take.ROWS:,} rows of {take.WIDTH} float32 from a {take.VOCAB} x {take.WIDTH} table "
             "(int32 indices): the token-embedding gather", take.inputs, take.graph, take.peer, rtol=0.0,
             moved=take.moved_bytes),
    Workload("sharded", "(a*b+c).sum() of three 16M vectors sharded over DEVICE,DEVICE:1 (axis 0) vs DEVICE "
             "alone, THREADS=1 and default threads", _positive_vectors, graphs.mul_add_sum,
             lambda ops, a, b, c: ops.sum(a * b + c), rtol=1e-4, kind="sharded"),
    Workload("mpi_sharded", "(a*b+c).sum() of three 16M vectors sharded over DEVICE@0,DEVICE@1 (two MPI ranks, "
             "THREADS=1 each) vs DEVICE alone in one process, THREADS=1", _positive_vectors, graphs.mul_add_sum,
             lambda ops, a, b, c: ops.sum(a * b + c), rtol=1e-4, kind="mpi_sharded"),
    Workload("graph_build", "build + schedule a 10,000-node elementwise graph", _graph_inputs, kind="graph_build"),
    Workload("contention", "default threads vs one thread, quiet and with one spinning process per core but one: "
             "a*b+a over 64K/1M/16M, softmax 1024x1024, the example transformer at 1x16 (bench/contention.py)",
             _graph_inputs, kind="contention", slow=True),
    Workload("const_realizes", "3,000 realizes of a + c_i on 256x256 float32, a new constant each time: "
             "kernels compiled, RSS growth, time per realize", _graph_inputs, kind="const_realizes"),
    Workload("safetensors_read", "safe_load of a 1 GiB sparse safetensors file, then a 1 KiB tensor copied to "
             "the device vs the ~1 GiB one: times and bytes the DISK runtime read", _graph_inputs,
             kind="safetensors_read"),
    *MINILM_WORKLOADS,
)

GRAPH_NODES = 10_000
GRAPH_NODES_QUICK = 200


def by_name(names: str | None) -> list[Workload]:
    """The workloads named in a comma list (all when None; a group name such as "matmul" or "minilm"
    stands for its members), in registry order; ValueError for unknown names."""
    if not names:
        return list(WORKLOADS)
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    groups = {workload.group for workload in WORKLOADS if workload.group}
    known = {workload.name for workload in WORKLOADS} | groups
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; known: {', '.join(sorted(known))}")
    return [workload for workload in WORKLOADS if workload.name in wanted or workload.group in wanted]


def element_count(shape: tuple[int, ...]) -> int:
    """Number of elements of a shape."""
    return math.prod(shape)


def seeded_inputs(workload: Workload, seed: int, quick: bool) -> list[np.ndarray]:
    """The workload's inputs, reproducible from the seed (and the same in every process: the MPI
    ranks of bench/mpi_sharded.py make their own)."""
    rng = np.random.default_rng([seed, zlib.crc32(workload.name.encode())])
    return workload.make_inputs(rng, quick)
