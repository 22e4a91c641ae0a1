"""Hand-written programs every run starts with: the op tour (tour.py) and the paths random
generation reaches only rarely.

Split reductions (>= 32768 inputs per output) in several dtypes, ring all-reduces above the
threshold and forced with RING=2, uneven sharding on 3 and 4 devices, mixed sharded axes, shrink
to one shard and pad back, a masked constant behind a reshape and expand, the stale read after an
assign, row kernels (softmax, layernorm, several outputs), output widths the vector lanes do not
divide (vector tails: a scalar loop finishes the row; on every device kind; float64 SIN broadcast
along a tail's loop), matrix products large
enough for fused multiply-adds, with and without overflowing products (on every device kind),
matrix products lowered as GEMMs in every layout on awkward sizes and views, and attention's batched
products on a head-split view (on every device kind),
column reductions walked in chunks, with work after them, and `a @ b.T` (on every device kind),
gathers with edge and out-of-range indices (on every device kind),
sharded structures realized three times (replays with native lanes),
symbolic shapes (bound Variables, each program replayed under three bindings, edges included; on
every device kind), and (when DISK is enabled) copies through DISK views.
"""
from __future__ import annotations

from conformance.profiles import GenConfig
from conformance.program import (
    ArrayData,
    Assign,
    ConstLike,
    Contiguous,
    Copy,
    Custom,
    Elementwise,
    Fetch,
    Gather,
    Leaf,
    LoadConst,
    Movement,
    Program,
    Realize,
    Reduce,
    Shard,
    Step,
    Var,
)
from conformance.tour import tour_programs


def _random(dtype: str, shape: tuple[int, ...], seed: int, device: str) -> Leaf:
    return Leaf(ArrayData(dtype, shape, seed=seed), device)


def _iota(dtype: str, shape: tuple[int, ...], device: str, scale: float = 1.0) -> Leaf:
    size = 1
    for s in shape:
        size *= s
    values = tuple((i % 11 - 5) * scale if dtype.startswith("float") else (i % 11 - 5 if dtype[0] == "i" else i % 11)
                   for i in range(size))
    return Leaf(ArrayData(dtype, shape, tuple(values)), device)


def split_reductions(dev: str) -> list[Program]:
    out = []
    for seed, (dtype, shape, op) in enumerate((("int32", (1, 65536), "SUM"), ("float32", (2, 32768), "SUM"),
                                                ("float16", (65536,), "MAX"), ("bool", (4, 40000), "SUM"),
                                                ("uint8", (1, 65536), "SUM"), ("float64", (3, 65536), "MAX"))):
        steps: list[Step] = [_random(dtype, shape, seed, dev), Elementwise("ADD", (0, 0)),
                             Reduce(1, op, (len(shape) - 1,)), Fetch(2)]
        out.append(Program(tuple(steps)))
    return out


def ring_reductions(cfg: GenConfig) -> list[Program]:
    out = []
    if cfg.max_devices >= 3:
        devices = cfg.shard_devices(min(4, cfg.max_devices))
        count = len(devices)
        big: list[Step] = [_random("int32", (count, 256_064), 7, devices[0]), Shard(0, devices, 0),
                           Reduce(1, "SUM", (0,)), Fetch(2)]
        out.append(Program(tuple(big)))
        big_float: list[Step] = [_random("float32", (3, 256_003), 8, devices[0]), Shard(0, devices[:3], 0),
                                 Reduce(1, "MAX", (0,)), Fetch(2)]
        out.append(Program(tuple(big_float)))
    for count in range(2, cfg.max_devices + 1):
        devices = cfg.shard_devices(count)
        small: list[Step] = [_iota("int32", (count * 2 - 1, 7), devices[0]), Shard(0, devices, 0),
                             Reduce(1, "SUM", (0,)), Fetch(2), Reduce(1, "MAX", (0, 1)), Fetch(4)]
        out.append(Program(tuple(small), ring=2))
        out.append(Program(tuple(small)))
    return out


def sharding(cfg: GenConfig) -> list[Program]:
    out = []
    for count in range(2, cfg.max_devices + 1):
        devices = cfg.shard_devices(count)
        dev = devices[0]
        rows = count * 2 - 1  # uneven
        steps: list[Step] = [
            _iota("float32", (rows, count), dev), Shard(0, devices, 0), _iota("float32", (rows, count), dev, 0.5),
            Shard(2, devices, 1), Elementwise("ADD", (1, 3)), Fetch(4),            # mixed axes
            Movement(1, "shrink", ((0, 2), (0, count))), Fetch(6),                 # shrink to shard 0
            Movement(6, "pad", ((0, rows - 2), (0, 0))), Fetch(8),                 # and pad back
            Reduce(1, "SUM", (1,)), Fetch(10), Copy(1, dev), Fetch(12),            # reduce kept axis, copy out
            Movement(1, "permute", (1, 0)), Reduce(14, "MAX", (1,)), Fetch(15),    # reduce over moved axis
            Reduce(6, "SUM", (0,)), Fetch(17),                                     # over axis, partly real
        ]
        out.append(Program(tuple(steps)))
        assign: list[Step] = [_iota("int16", (rows, 3), dev), Shard(0, devices, 0), Contiguous(1), Realize((2,)),
                              _iota("int16", (rows, 3), dev), Shard(4, devices, 0), Elementwise("ADD", (2, 5)),
                              Assign(2, 6), Realize((7,)), Fetch(7), Fetch(0)]
        out.append(Program(tuple(assign)))
    devices = cfg.shard_devices(min(3, cfg.max_devices))
    deep: list[Step] = [_iota("int32", (2, 2, 5), devices[0]), Shard(0, devices, 2),
                        _iota("int32", (2, 2, 5), devices[0]), Shard(2, devices, None), Elementwise("MUL", (1, 3)),
                        Fetch(4), Reduce(4, "SUM", (2,)), Fetch(6)]
    out.append(Program(tuple(deep)))
    return out


def graph_traps(dev: str) -> list[Program]:
    masked: list[Step] = [LoadConst((2, 3), "float32", dev, 2.0), Movement(0, "pad", ((1, 1), (0, 1))),
                          Movement(1, "reshape", (4, 4, 1)), Movement(2, "expand", (4, 4, 3)),
                          LoadConst((4, 4, 3), "float32", dev, 1.0), Elementwise("DIV", (4, 3)), Fetch(5)]
    stale: list[Step] = [_iota("int32", (3, 2), dev), Realize((0,)), _iota("int32", (3, 2), dev),
                         Elementwise("ADD", (0, 2)), Elementwise("MAX", (0, 2)), Realize((4,)),
                         Elementwise("MUL", (0, 2)), Elementwise("MAX", (2, 0)), Assign(0, 7), Realize((8, 3)),
                         Fetch(8), Fetch(3), Fetch(4), Fetch(0), Realize((6,))]
    wrap: list[Step] = [LoadConst((3,), "int32", dev, -1), Elementwise("ADD", (0, 0)),
                        LoadConst((3,), "uint16", dev, -1), Fetch(1), Fetch(2)]
    alias: list[Step] = [_iota("int32", (3, 2), dev), Movement(0, "shrink", ((0, 2), (0, 2))), Contiguous(1),
                         Realize((2,)), _iota("int32", (2, 2), dev, 7), Assign(2, 4), Realize((5,)), Fetch(5),
                         Fetch(0)]
    empty: list[Step] = [_iota("int8", (0, 3), dev), Reduce(0, "MAX", (0,)), Fetch(1), _iota("float16", (2, 0), dev),
                         Reduce(3, "SUM", (1,)), Fetch(4), Reduce(3, "MAX", (0, 1)), Fetch(6)]
    return [Program(tuple(masked)), Program(tuple(stale), expect="RuntimeError"), Program(tuple(wrap)),
            Program(tuple(alias)), Program(tuple(empty))]


def row_kernels(dev: str) -> list[Program]:
    """Softmax- and layernorm-shaped chains (reduced rows read back along the row: one row kernel in
    fast), two reductions of one input combined, and two outputs of one input realized together."""
    softmax: list[Step] = [_random("float32", (5, 37), 21, dev), Reduce(0, "MAX", (1,)),
                           Movement(1, "expand", (5, 37)), Elementwise("SUB", (0, 2)), Elementwise("EXP2", (3,)),
                           Reduce(4, "SUM", (1,)), Movement(5, "expand", (5, 37)), Elementwise("DIV", (4, 6)),
                           Fetch(7)]
    norm: list[Step] = [_iota("float16", (3, 4, 20), dev), Reduce(0, "SUM", (1, 2)), Movement(1, "expand", (3, 4, 20)),
                        Elementwise("SUB", (0, 2)), Elementwise("MUL", (3, 3)), Reduce(4, "SUM", (1, 2)),
                        Movement(5, "expand", (3, 4, 20)), Elementwise("ADD", (3, 6)), Fetch(7)]
    pair: list[Step] = [_iota("int32", (4, 33), dev), Reduce(0, "SUM", (1,)), Reduce(0, "MAX", (1,)),
                        Elementwise("SUB", (1, 2)), Fetch(3), Elementwise("MUL", (0, 0)), Elementwise("ADD", (0, 0)),
                        Realize((5, 6)), Fetch(5), Fetch(6)]
    return [Program(tuple(softmax)), Program(tuple(norm)), Program(tuple(pair))]


def output_tails(cfg: GenConfig) -> list[Program]:
    """On every device kind: two reductions of one input in one kernel, an elementwise chain and a
    column sum, each over a width no vector lane count divides (7, 13 and 33: the vectorized part
    and the scalar tail both run; a tail that writes nothing shows as garbage under ALLOC_POISON), and
    float64 SIN of a view broadcast along the loop of such a tail."""
    out = []
    for dev in cfg.kinds:
        for dtype, shape in (("float32", (7, 33)), ("int32", (13, 33))):
            pair: list[Step] = [_random(dtype, shape, 41, dev), Reduce(0, "SUM", (1,)), Reduce(0, "MAX", (1,)),
                                Elementwise("ADD", (1, 2)), Fetch(3)]
            out.append(Program(tuple(pair)))
        chain: list[Step] = [_random("float32", (3, 97), 42, dev), Movement(0, "stride", (1, -1)),
                             Elementwise("MUL", (0, 1)), Elementwise("ADD", (2, 0)), Fetch(3),
                             Reduce(0, "SUM", (0,)), Fetch(5)]
        out.append(Program(tuple(chain)))
        # seed 6's timeout: float64 SIN broadcast along the loop of the scalar tail (LLVM's loop
        # vectorizer took minutes on it: fast/renderer/llvm_loops.py)
        sine: list[Step] = [_random("float64", (2, 33, 1), 43, dev), Movement(0, "reshape", (2, 1, 33, 1)),
                            Movement(1, "expand", (2, 16, 33, 1)), Elementwise("SIN", (2,)), Fetch(3)]
        out.append(Program(tuple(sine)))
    return out


def _indices(dtype: str, values: tuple[int, ...], shape: tuple[int, ...], device: str) -> Leaf:
    return Leaf(ArrayData(dtype, shape, values), device)


def gathers(cfg: GenConfig) -> list[Program]:
    """On every device kind, `gather` with edge indices (0, n - 1, -1, -n) of int32, int64 and uint8
    along each axis; of a flipped and padded view, by a flipped index view, fused with an add and a
    reduce; an empty index array; and indices one past each end, which both sides refuse with an
    IndexError when the value is fetched (docs/semantics.md, "Gather")."""
    out = []
    for dev in cfg.kinds:
        edges: list[Step] = [_random("float32", (5, 7), 61, dev), _indices("int32", (0, 4, -1, -5, 2), (5,), dev),
                             Gather(0, 1, 0), Fetch(2), _indices("int64", (0, 6, -1, -7, 3, 3), (2, 3), dev),
                             Gather(0, 4, 1), Fetch(5)]
        views: list[Step] = [_random("int16", (5, 7), 62, dev), Movement(0, "stride", (-1, 1)),
                             Movement(1, "pad", ((1, 0), (0, 2))),  # (6, 9): a flipped, padded view
                             _indices("int64", (0, -1, 8, -9, 4, 0), (2, 3), dev), Movement(3, "stride", (1, -1)),
                             Gather(2, 4, 1), Elementwise("ADD", (5, 5)), Fetch(6), Reduce(6, "SUM", (2,)), Fetch(8)]
        rows: list[Step] = [_random("float16", (4, 33), 63, dev), _indices("uint8", (3, 0, 3, 1), (4,), dev),
                            Gather(0, 1, 0), Fetch(2), _indices("int32", (), (0,), dev), Gather(0, 4, 0), Fetch(5)]
        out += [Program(tuple(edges)), Program(tuple(views)), Program(tuple(rows))]
        for bad in (5, -6):
            refused: list[Step] = [_random("float32", (5, 3), 64, dev), _indices("int32", (0, bad), (2,), dev),
                                   Gather(0, 1, 0), Fetch(2)]
            out.append(Program(tuple(refused), expect="IndexError"))
    return out


def chunked_reductions(cfg: GenConfig) -> list[Program]:
    """On every device kind, reductions over a strided axis long enough to be walked in chunks with
    partial totals kept in the output (fast/codegen/opt.py `_chunk_strided_reduce`): a column mean
    and a column max with a bias and a ReLU after it (work applied to the last chunk's total only),
    an int32 column sum scaled, a column sum and max of one input in one kernel (never chunked), a
    matrix product plus a bias, and `a @ b.T` (a register tile of dot products)."""
    out: list[Program] = []
    for dev in cfg.kinds:
        mean: list[Step] = [_random("float32", (64, 48), 71, dev), Reduce(0, "SUM", (0,)), ConstLike(1, 0.015625),
                            Elementwise("MUL", (1, 2)), Fetch(3)]
        relu: list[Step] = [_random("float32", (40, 33), 72, dev), _random("float32", (1, 33), 73, dev),
                            Reduce(0, "MAX", (0,)), Elementwise("ADD", (2, 1)), ConstLike(3, 0.0),
                            Elementwise("MAX", (3, 4)), Fetch(5)]
        scaled: list[Step] = [_iota("int32", (72, 20), dev), Reduce(0, "SUM", (0,)), ConstLike(1, 3),
                              Elementwise("MUL", (1, 2)), Fetch(3)]
        pair: list[Step] = [_random("float32", (40, 40), 74, dev), Reduce(0, "SUM", (0,)), Reduce(0, "MAX", (0,)),
                            Elementwise("ADD", (1, 2)), Fetch(3)]
        product = _matmul_steps(_random("float32", (12, 64), 75, dev), _random("float32", (64, 40), 76, dev))
        product[-1:] = [_random("float32", (12, 40, 1), 77, dev), Elementwise("ADD", (8, 9)), Fetch(10)]
        transposed: list[Step] = [_random("float32", (12, 64), 78, dev), _random("float32", (8, 64), 79, dev),
                                  Movement(0, "reshape", (12, 1, 64)), Movement(2, "expand", (12, 8, 64)),
                                  Movement(1, "reshape", (1, 8, 64)), Movement(4, "expand", (12, 8, 64)),
                                  Elementwise("MUL", (3, 5)), Reduce(6, "SUM", (2,)), Fetch(7)]
        out.extend(Program(tuple(steps)) for steps in (mean, relu, scaled, pair, product, transposed))
    return out


def _matmul_steps(x: Leaf, y: Leaf) -> list[Step]:
    """x (m, k) @ y (k, n) as users build it: expand, multiply, SUM over k; fetched."""
    (m, k), (_, n) = x.data.shape, y.data.shape
    return [x, y, Movement(0, "reshape", (m, 1, k)), Movement(2, "expand", (m, n, k)),
            Movement(1, "permute", (1, 0)), Movement(4, "reshape", (1, n, k)), Movement(5, "expand", (m, n, k)),
            Elementwise("MUL", (3, 6)), Reduce(7, "SUM", (2,)), Fetch(8)]


def _with_extremes(dtype: str, shape: tuple[int, int], device: str, big: float) -> Leaf:
    """Small integers with +big and -big in column 0 of rows 1 and 2 (products of `big` overflow)."""
    leaf = _iota(dtype, shape, device)
    values = list(leaf.data.values)
    values[shape[1]], values[2 * shape[1]] = big, -big
    return Leaf(ArrayData(dtype, shape, tuple(values)), device)


def fused_products(cfg: GenConfig) -> list[Program]:
    """On every device kind, matrix products large enough (>= 128 flops per input element) to be
    lowered with fused multiply-adds on FMA hosts (fast/codegen/fma.py): random float32 and float64
    (the fused kernel runs), and float32 with +-3e38 in both operands (products overflow: the guard
    runs the unfused kernel, and the infinities and NaNs must be the specified ones)."""
    out = []
    for dev in cfg.kinds:
        for dtype, seed in (("float32", 61), ("float64", 62)):
            out.append(Program(tuple(_matmul_steps(_random(dtype, (160, 8), seed, dev),
                                                   _random(dtype, (8, 200), seed + 10, dev)))))
        out.append(Program(tuple(_matmul_steps(_with_extremes("float32", (160, 8), dev, 3e38),
                                               _with_extremes("float32", (8, 200), dev, 3e38)))))
    return out


def _product_steps(steps: list[Step], a: int, b: int, batch: tuple[int, ...], m: int, k: int, n: int) -> int:
    """Append `a (*batch, m, k) @ b (*batch, k, n)` (expand, multiply, SUM over k) to `steps`;
    returns the index of the product, of shape (*batch, m, n, 1)."""
    full = (*batch, m, n, k)
    last = len(batch) + 1
    order = (*range(len(batch)), last, last - 1)
    steps += [Movement(a, "reshape", (*batch, m, 1, k)), Movement(len(steps), "expand", full),
              Movement(b, "permute", order)]
    steps += [Movement(len(steps) - 1, "reshape", (*batch, 1, n, k)), Movement(len(steps), "expand", full)]
    steps += [Elementwise("MUL", (len(steps) - 4, len(steps) - 1)), Reduce(len(steps), "SUM", (len(full) - 1,))]
    return len(steps) - 1


def _layout(dev: str, m: int, k: int, n: int, seed: int, layout: str, views: str = "") -> Program:
    """One matrix product in a layout ("ab", "abt", "atb") on (m, k) x (k, n), through `views`
    ("flip": A's rows reversed, "pad": K padded by one zero on both, "bias": + bias then ReLU)."""
    steps: list[Step] = [_random("float32", (k, m) if layout == "atb" else (m, k), seed, dev),
                         _random("float32", (n, k) if layout == "abt" else (k, n), seed + 1, dev)]
    a, b = 0, 1
    if layout == "atb":
        steps.append(Movement(0, "permute", (1, 0)))
        a = len(steps) - 1
    if layout == "abt":
        steps.append(Movement(1, "permute", (1, 0)))
        b = len(steps) - 1
    if "flip" in views:
        steps.append(Movement(a, "stride", (-1, 1)))
        a = len(steps) - 1
    if "pad" in views:
        steps += [Movement(a, "pad", ((0, 0), (0, 1))), Movement(b, "pad", ((0, 1), (0, 0)))]
        a, b, k = len(steps) - 2, len(steps) - 1, k + 1
    out = _product_steps(steps, a, b, (), m, k, n)
    if "bias" in views:
        steps += [_random("float32", (1, n, 1), seed + 2, dev), Movement(len(steps), "expand", (m, n, 1))]
        steps += [Elementwise("ADD", (out, len(steps) - 1)), ConstLike(len(steps), 0.0)]
        steps.append(Elementwise("MAX", (len(steps) - 2, len(steps) - 1)))
        out = len(steps) - 1
    return Program(tuple([*steps, Fetch(out)]))


def matmul_layouts(cfg: GenConfig) -> list[Program]:
    """On every device kind, matrix products large enough to be lowered as GEMMs (fast/codegen/gemm.py:
    at least 32 rows) in every layout (`a @ b`, `a @ b.T`, `a.T @ b`), on awkward sizes (primes, one
    more and one less than the register tiles of 6, 8 or 12 rows and 16, 32 or 64 columns, K of 4 and 129,
    M long enough that the full tile takes an edge block;
    K of 16, 47 and 129 also cover `a @ b.T`'s packing in squares of lanes x lanes with and without
    steps left over, N = 64 with no edge micro-panel; K of 67 and 80 with 131 and 260 columns pack A, and
    `a.T @ b` packs it in squares; K of 1024 runs in chunks; sizes that run on AMX tiles, and a tile product
    with +-3e38 in both operands, whose tiles fall back to the unfused loop), through flipped and padded
    views, with a bias and ReLU after; attention's batched products on a head-split view: `q @ q.T` over (batch,
    heads) and `p @ v`; and batched products whose contiguous B of 16 or 32 columns is read in place."""
    out = []
    sizes = ((33, 5, 31), (37, 129, 17), (47, 4, 33), (97, 16, 65), (41, 47, 64),
             # long M (32 full tiles or more: gemm.LONG_M_BLOCKS): the full tile with an edge block
             # (193, 197: 6 rows with AVX2; 389: 12 with AVX-512) or 5 rows that divide it (200);
             # with AVX-512 the wide tile of 6 rows x 4 vectors with edge rows and edge columns
             # (197 x 70, 203 x 129: one column past two micro-panels of 64)
             (193, 9, 17), (197, 31, 33), (200, 5, 20), (389, 7, 19), (197, 31, 70), (203, 65, 129),
             # packed A (K >= 64, at least 4 micro-panels): `a.T @ b` packs its A in squares
             # (gemm_pack_a.py), with a K tail (67) and without (80), edge blocks and an edge panel
             (101, 67, 131), (389, 80, 260),
             # K of 1024 in chunks of KC steps (gemm.py `chunk_steps`: N whole vectors, A packed)
             (37, 1024, 144),
             # on AMX tiles where the host has them (gemm_tiles.py: K % 32, M % 16, N % 32): one tile,
             # several of each, A's pieces in several groups of rows, K = 1536 (3 pieces of 48 steps)
             (32, 32, 32), (48, 64, 96), (64, 128, 32), (160, 384, 64), (32, 1536, 64))
    for dev in cfg.kinds:
        for number, (m, k, n) in enumerate(sizes):
            for layout in ("ab", "abt", "atb"):
                out.append(_layout(dev, m, k, n, 80 + number, layout))
        out += [_layout(dev, 41, 23, 49, 90, "abt", "flip pad bias"), _layout(dev, 36, 9, 16, 91, "ab", "bias flip"),
                _layout(dev, 101, 67, 131, 92, "atb", "pad bias"), _layout(dev, 64, 96, 64, 93, "abt", "flip bias")]
        out.append(Program(tuple(_matmul_steps(_with_extremes("float32", (64, 64), dev, 3e38),
                                               _with_extremes("float32", (64, 64), dev, 3e38)))))
        out.append(_attention(dev))
        out += [_batched_product(dev, 3, 37, 129, n, 95 + n) for n in (16, 32)]
    return out


def _batched_product(dev: str, batch: int, m: int, k: int, n: int, seed: int) -> Program:
    """A batched `a @ b` with B contiguous: with N one micro-panel of two vectors (16 columns with
    AVX2, 32 with AVX-512) the GEMM reads B where it is (codegen/gemm_pack.py `reads_b_in_place`)."""
    steps: list[Step] = [_random("float32", (batch, m, k), seed, dev), _random("float32", (batch, k, n), seed + 1, dev)]
    out = _product_steps(steps, 0, 1, (batch,), m, k, n)
    return Program(tuple([*steps, Fetch(out)]))


def _attention(dev: str, batch: int = 2, tokens: int = 33, heads: int = 3, size: int = 8) -> Program:
    """Scores `q @ q.T` of a head-split view (batch, tokens, heads * size) -> (batch, heads, tokens,
    size), then `p @ v` of random weights p over the same view."""
    steps: list[Step] = [_random("float32", (batch, tokens, heads * size), 95, dev),
                         Movement(0, "reshape", (batch, tokens, heads, size)), Movement(1, "permute", (0, 2, 1, 3))]
    scores = _product_steps(steps, 2, 2, (batch, heads), tokens, size, tokens)
    steps.append(Fetch(scores))
    steps += [_random("float32", (batch, heads, tokens, tokens), 96, dev), Movement(2, "permute", (0, 1, 3, 2))]
    context = _product_steps(steps, len(steps) - 2, len(steps) - 1, (batch, heads), tokens, tokens, size)
    return Program(tuple([*steps, Fetch(context)]))


def replayed_shards(cfg: GenConfig) -> list[Program]:
    """A sharded structure realized three times over fresh leaves, large enough (over 1 MB per
    device) for the devices to run in lanes: scheduled, then replayed through `run_schedule` (which
    makes the lane plan), then replayed with the other lanes as native jobs (fast/engine/
    replay_lanes.py). Over the shard axis (an all-reduce; with three devices its first copy waits
    across lanes) and along it (a split reduction per device), on two and three devices."""
    out = []
    for count in sorted({2, min(3, cfg.max_devices)}):
        if count > cfg.max_devices:
            continue
        devices = cfg.shard_devices(count)
        steps: list[Step] = []
        for repeat in range(3):
            base = len(steps)
            steps += [_random("float32", (count, 300_007), 70 + repeat, devices[0]), Shard(base, devices, 0),
                      Elementwise("MUL", (base + 1, base + 1)), Reduce(base + 2, "SUM", (0,)), Fetch(base + 3),
                      Elementwise("ADD", (base + 1, base + 2)), Reduce(base + 5, "MAX", (1,)), Fetch(base + 6)]
        out.append(Program(tuple(steps)))
    return out


def symbolic(cfg: GenConfig) -> list[Program]:
    """On every device kind, each under three bindings: a softmax over `n` of 8 rows (a row kernel);
    a window `(n, 8)` whose offset moves, summed and maxed over to nothing at n = 8 (the empty axis);
    `(n, 6)` reshaped to `(2, n, 3)` and `(6, n)` with n possibly 0, permuted, flipped and reduced;
    a CUSTOM flip of an `(3, m)` window padded by `m`; a CONST of shape `(n, m)` over two variables."""
    out = []
    n, m, z = Var("n", 1, 8), Var("m", 1, 4), Var("n", 0, 6)
    for dev in cfg.kinds:
        softmax: list[Step] = [_random("float32", (8, 37), 51, dev), Movement(0, "shrink", ((0, n), (0, 37))),
                               Reduce(1, "MAX", (1,)), Movement(2, "expand", (n, 37)), Elementwise("SUB", (1, 3)),
                               Elementwise("EXP2", (4,)), Reduce(5, "SUM", (1,)), Movement(6, "expand", (n, 37)),
                               Elementwise("DIV", (5, 7)), Fetch(8)]
        edge: list[Step] = [_iota("int32", (8, 5), dev), Movement(0, "shrink", ((n, 8), (0, 5))),
                            Reduce(1, "MAX", (0,)), Reduce(1, "SUM", (0,)), Elementwise("ADD", (2, 3)), Fetch(4),
                            Fetch(1)]
        views: list[Step] = [_iota("float16", (6, 6), dev), Movement(0, "shrink", ((0, z), (0, 6))),
                             Elementwise("MUL", (1, 1)), Movement(2, "reshape", (2, z, 3)),
                             Movement(3, "permute", (1, 0, 2)), Contiguous(4), Reduce(5, "SUM", (0,)), Fetch(6),
                             Movement(2, "reshape", (6, z)), Movement(8, "stride", (-1, 1)), Fetch(9),
                             Reduce(9, "MAX", (1,)), Fetch(11)]
        custom: list[Step] = [_iota("int16", (3, 5), dev), Movement(0, "shrink", ((0, 3), (0, m))),
                              Custom("flip", (1,), (3, m), "int16", dev), Movement(2, "pad", ((0, 0), (m, 0))),
                              Elementwise("ADD", (3, 3)), Fetch(4)]
        two: list[Step] = [LoadConst((n, m), "float32", dev, 1.5), _iota("float32", (8, 4), dev),
                           Movement(1, "shrink", ((0, n), (0, m))), Elementwise("MUL", (0, 2)),
                           Reduce(3, "SUM", (0, 1)), Fetch(4), Fetch(3)]
        out += [Program(tuple(softmax), variables=(n,), bindings=((5,), (1,), (8,))),
                Program(tuple(edge), variables=(n,), bindings=((3,), (8,), (1,))),
                Program(tuple(views), variables=(z,), bindings=((4,), (0,), (6,))),
                Program(tuple(custom), variables=(m,), bindings=((2,), (4,), (1,))),
                Program(tuple(two), variables=(n, m), bindings=((3, 2), (8, 1), (1, 4)))]
    return out


def disk(cfg: GenConfig) -> list[Program]:
    if cfg.disk_dir is None:
        return []
    dev = cfg.kinds[0]
    steps: list[Step] = [_iota("float32", (4, 6), dev), Copy(0, f"DISK:{cfg.disk_dir}/directed0"), Realize((1,)),
                         Movement(1, "shrink", ((1, 3), (0, 6))), Movement(3, "permute", (1, 0)),
                         Copy(4, dev), Fetch(5), Movement(1, "stride", (-1, 2)), Copy(7, dev), Fetch(8)]
    return [Program(tuple(steps))]


def copy_target(cfg: GenConfig, kind: str) -> str:
    """The device the tour of `kind` copies to: the kind's second device when the run allows one
    (`kind:1`), else the first device of another kind, else `kind` itself. Never a device beyond
    `--devices KIND=N` (`CUDA=1,CLANG` on a machine with one GPU copies CUDA -> CLANG)."""
    if cfg.count(kind) >= 2:
        return cfg.device(kind, 1)
    return next((other for other in cfg.kinds if other != kind), kind)


def directed_programs(cfg: GenConfig) -> list[Program]:
    """Every run's fixed programs: the op tour of each device kind, then the rare paths above."""
    dev = cfg.kinds[0]
    tours = [program for kind in cfg.kinds for program in tour_programs(kind, copy_target(cfg, kind))]
    return [*tours, *split_reductions(dev), *ring_reductions(cfg), *sharding(cfg), *graph_traps(dev),
            *row_kernels(dev), *output_tails(cfg), *chunked_reductions(cfg), *fused_products(cfg), *matmul_layouts(cfg),
            *replayed_shards(cfg), *symbolic(cfg), *gathers(cfg),
            *disk(cfg)]
