"""LazyBuffer: a node of the lazy graph (SPEC §1, §4), its weak cache and the constructors every
operation builds through. Building a graph runs nothing.

Shape of the graph:
- A *base* (`lb.base is lb`) has `op`, `arg`, `srcs`, a `buffer` (a `device.Buffer`, made on first use
  and allocated only when realized; ASSIGN shares its target's Buffer, VIEW is a zero-copy view of
  its source's Buffer) and `st` = `ShapeTracker.from_shape(shape)`.
- A *view* (`lb.base is not lb`) has no op: it is its base read through `st` (relative to the base).
  Views are built by the six movement ops; views of views are flattened onto the one base.
- `realized` is the base's Buffer once it holds values, else None. For ASSIGN, "holds values" means
  the engine has bumped the target Buffer's `version` past the version it had when the ASSIGN was
  built (the engine calls `Buffer.bump_version()` once it has run the assign).

Rules applied while building (each mirrors a line of SPEC §4): a weak cache (identical nodes are one
object while alive; `config.lazycache`), zero-size graphs become CONST 0 (but `from_numpy` always
returns a realized buffer, 0 bytes when empty, and an assign into it returns the target), constant folding and
identities (`fast/graph/rules.py`), reduce folding and splitting, views instead of copies for
consecutive realized buffers, cast-before-view, copy simplifications, contiguous-child reuse.
Validation (`fast/graph/checks.py`) runs before any node is built.

Layering (fast/graph/__init__.py): this module imports only checks, keys and versions of the package.
It builds the elementwise op, constants and movement ops itself; the methods reach the longer
operations (fast/graph/operations.py, built through this module's constructors) through `OPERATIONS`.

Ordering of assigns (SPEC §4): see fast/graph/versions.py. Each base records the expected version of
every source it reads (`src_versions`), each view and VIEW base the one of the memory it aliases
(`alias_version`); `stale_reads()` and `stale_alias()` report what a realized assign has overwritten.

Reference counting: a base's Buffer is made on first use (`buffer`; at once for ASSIGN and VIEW, which
alias a source's memory); the base then holds one `ref` on it and drops it when collected. The Buffer
frees its memory when the count returns to zero and no view of it is alive.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from fast import config
from fast.device import Buffer, Device
from fast.dtype import ConstType, DType
from fast.graph import checks
from fast.graph import versions as ordering
from fast.graph.keys import arg_key, bound_values, broadcast_tracker, const_value, max_size, normalized, tracker
from fast.ops import (
    LOAD_ASSIGN,
    LOAD_CONST,
    LOAD_CONTIGUOUS,
    LOAD_COPY,
    LOAD_CUSTOM,
    LOAD_EMPTY,
    LOAD_VIEW,
    UNARY_NEG,
    LoadOps,
    Op,
    ReduceOps,
    not_a,
)
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Variable, sint

# The weak cache: key -> a one-item list holding a weak reference to the node (None while it is
# being made), so a miss hashes its key once (`create`'s setdefault) rather than twice. Entries
# leave in LazyBuffer.__del__.
_CACHE: dict[tuple[Any, ...], list[weakref.ref[LazyBuffer] | None]] = {}
LOAD_OPS_FOR_USERS = (LOAD_EMPTY, LOAD_CONST, LOAD_CUSTOM)


class Operations:
    """The operations longer than one node, keyed by name: fast/graph/operations.py sets each entry
    beside its definition when the package is imported, before any LazyBuffer exists; the methods call
    them with validated arguments. (A test planting a bug in one sets the entry, not the function.)"""

    __slots__ = ("fold_constants", "double_negation", "reduce", "cast", "bitcast", "contiguous", "copy_to_device",
                 "assign", "gather", "matmul")
    fold_constants: Callable[[Op, tuple[LazyBuffer, ...], DType], LazyBuffer | None]
    double_negation: Callable[[LazyBuffer], LazyBuffer | None]
    reduce: Callable[[LazyBuffer, ReduceOps, tuple[int, ...]], LazyBuffer]
    cast: Callable[[LazyBuffer, DType], LazyBuffer]
    bitcast: Callable[[LazyBuffer, DType], LazyBuffer]
    contiguous: Callable[[LazyBuffer], LazyBuffer]
    copy_to_device: Callable[[LazyBuffer, str, bool], LazyBuffer]
    assign: Callable[[LazyBuffer, LazyBuffer], LazyBuffer]
    gather: Callable[[LazyBuffer, LazyBuffer, int], LazyBuffer]
    matmul: Callable[[LazyBuffer, LazyBuffer, tuple[sint, ...]], LazyBuffer]


OPERATIONS = Operations()


class LazyBuffer:
    """A lazy tensor: a base node of the graph or a view of one (see the module docstring).

    Build nodes with `loadop`, `from_numpy` and the methods, never with the constructor. The scheduler
    reads, on bases: `op arg srcs buffer realized forced_realize contiguous_child` and calls
    `stale_reads()`: a non-empty result for an unrealized base means it was built from a Buffer that a
    realized assign has overwritten since, and realizing it must raise RuntimeError; and, on what it
    is asked to realize, `stale_alias()` (a view or VIEW base of overwritten memory: RuntimeError too).
    """

    __slots__ = ("device", "st", "dtype", "shape", "size", "_base", "op", "arg", "srcs", "_buffer",
                 "forced_realize", "contiguous_child", "src_versions", "_assign_version", "alias_version",
                 "cache_key", "engine_memo", "__weakref__")
    op: Op
    arg: Any
    srcs: tuple[LazyBuffer, ...]
    forced_realize: bool
    contiguous_child: tuple[weakref.ref[LazyBuffer], ShapeTracker] | None
    src_versions: tuple[int, ...]  # the expected version of each source read (`_reads(op, srcs)`)
    alias_version: int  # views and VIEW bases: the expected version of the memory they alias
    cache_key: tuple[Any, ...] | None  # this node's key in the weak cache, if it is there
    engine_memo: tuple[Any, ...] | None  # bases: a fact the engine derived from op/arg/dtype/shape/device

    def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Op | None = None, arg: Any = None,
                 srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None,
                 src_versions: tuple[int, ...] | None = None) -> None:
        self._buffer: Buffer | None = None
        self.device, self.st, self.dtype, self._base, self.cache_key = device, st, dtype, base, None
        shape = self.shape = st.views[-1].shape
        self.size: sint = st.size
        if base is not None:
            self.alias_version = ordering.expected_version(base)
            return
        if op is None:
            raise RuntimeError("LazyBuffer: internal error, a base needs an op")
        self.op, self.arg, self.srcs = op, arg, srcs
        self.forced_realize = op is LOAD_CONTIGUOUS or op is LOAD_ASSIGN or op is LOAD_COPY
        self.contiguous_child = self.engine_memo = None
        self.src_versions = ordering.read_versions(op, srcs) if src_versions is None else src_versions
        self._assign_version = self.alias_version = 0
        if op is LOAD_ASSIGN or op is LOAD_VIEW:  # they alias a source's memory: made now
            self._buffer = _aliasing_buffer(device, shape, dtype, op, arg, srcs)
            self._buffer.ref(1)
            self._assign_version = self._buffer.version
            self.alias_version = ordering.expected_version(srcs[0]) if op is LOAD_VIEW else 0

    def __del__(self) -> None:
        buffer = self._buffer
        if buffer is not None:
            buffer.ref(-1)
        key = self.cache_key
        if key is not None and _CACHE is not None:  # (None only while the interpreter shuts down)
            holder = _CACHE.pop(key, None)  # one hash of the key; put back if it names another live node
            if holder is not None and (ref := holder[0]) is not None and (alive := ref()) is not None \
                    and alive is not self:
                _CACHE[key] = holder

    def __repr__(self) -> str:
        if self._base is not None:
            return f"<LB {self.device} {self.shape} {self.dtype.name} view of {self._base!r}>"
        return f"<LB {self.device} {self.shape} {self.dtype.name} {self.op.name} arg={self.arg!r}>"

    # ------------------------------------------------------------ inspection

    @property
    def base(self) -> LazyBuffer:
        return self if self._base is None else self._base

    @property
    def buffer(self) -> Buffer:
        """The base's Buffer (a view answers its base's). Made on first use, unallocated, holding one
        `ref` for this base: building a graph makes no Buffer for the nodes that nothing asks about."""
        if self._base is not None:
            return self._base.buffer
        buffer = self._buffer
        if buffer is None:
            size = self.size if type(self.size) is int else max_size(self.shape)
            buffer = self._buffer = Buffer(self.device, size, self.dtype)
            buffer.ref(1)
        return buffer

    @property
    def realized(self) -> Buffer | None:
        """The base's Buffer once it holds values, else None."""
        base = self.base
        buffer = base._buffer
        if buffer is None or not buffer.is_allocated():
            return None
        if base.op is LOAD_ASSIGN and buffer.version <= base._assign_version:
            return None
        return buffer

    def is_realized(self) -> bool:
        return self.realized is not None

    def is_unrealized_const(self) -> bool:
        base = self.base
        return base.op is LOAD_CONST and (base._buffer is None or not base._buffer.is_allocated())

    def is_unrealized_unmasked_const(self) -> bool:
        return self.is_unrealized_const() and (self._base is None or all(view.mask is None for view in self.st.views))

    def stale_reads(self) -> list[tuple[Buffer, int]]:
        """(Buffer, expected version) for each memory the base reads directly that has been assigned
        past the version it was read at (one entry per memory, the lowest version)."""
        return ordering.stale_reads(self.base)

    def stale_alias(self) -> tuple[Buffer, int] | None:
        """For a view or a VIEW base whose memory a realized assign has overwritten since it was
        built: (Buffer, the version it expected); else None."""
        return ordering.stale_alias(self)

    @property
    def var_vals(self) -> dict[Variable, int]:
        """Values of the bound symbolic Variables in this buffer's view."""
        return self.st.var_vals

    # ------------------------------------------------------------ creation

    @staticmethod
    def loadop(op: LoadOps, shape: tuple[sint, ...], dtype: DType, device: str, arg: Any = None,
               src: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:
        """A new EMPTY, CONST (a base of `shape` holding `arg`) or CUSTOM (`arg(out, *inputs)`) buffer."""
        if op not in LOAD_OPS_FOR_USERS:
            raise TypeError(not_a("loadop", op, "one of LoadOps.EMPTY, CONST, CUSTOM"))
        checked = checks.check_shape(op.name, shape)
        dtype = checks.check_dtype(op.name, dtype)
        device = Device.canonicalize(device)
        if op is LOAD_CONST:
            checks.check_compute_device("CONST", device)
            arg = const_value("CONST", arg, dtype)
        elif op is LOAD_CUSTOM and not callable(arg):
            raise TypeError(f"CUSTOM: arg must be a callable fn(out, *inputs), got {arg!r}")
        if not isinstance(src, (tuple, list)):
            raise TypeError(f"{op.name}: src must be a tuple of LazyBuffers, got {src!r}")
        srcs = tuple(checks.check_lazy(op.name, s, LazyBuffer) for s in src)
        if op is LOAD_EMPTY and not srcs and tracker(checked).size == 0:
            return LazyBuffer(device, tracker(checked), dtype, op)  # a real (0-byte) buffer, not a CONST
        return create(device, tracker(checked), dtype, op, arg, srcs)

    def const(self, val: ConstType, shape: tuple[sint, ...] | None = None) -> LazyBuffer:
        """`val` (in this buffer's dtype) broadcast to `shape` (default: this shape), same device."""
        if self.device.startswith("DISK:"):
            checks.check_compute_device("CONST", self.device)
        checked = self.shape if shape is None else checks.check_shape("CONST", shape)
        return const_node(self.device, self.dtype, const_value("CONST", val, self.dtype), checked, is_normalized=True)

    # ------------------------------------------------------------ compute

    def e(self, op: Op, *srcs: LazyBuffer, arg: Any = None) -> LazyBuffer:
        """Elementwise `op` with self as the first operand. (The hot path of graph building: the
        rare cases, constant operands and contiguous children, are tested inline first.)"""
        operands = (self, *srcs)
        out_dtype = checks.check_elementwise(op, operands, LazyBuffer)
        constant = redirected = False
        for s in operands:
            base = s._base or s
            constant = constant or base.op is LOAD_CONST
            redirected = redirected or base.contiguous_child is not None
        if constant and (folded := OPERATIONS.fold_constants(op, operands, out_dtype)) is not None:
            return folded
        if op is UNARY_NEG and (inner := OPERATIONS.double_negation(self)) is not None:
            return inner
        resolved = tuple([redirect(s) for s in operands]) if redirected else operands
        st = self.st if self._base is None else tracker(self.shape)  # a base's st is from_shape(shape)
        return create(self.device, st, out_dtype, op, arg, resolved)

    def r(self, op: ReduceOps, axis: tuple[int, ...]) -> LazyBuffer:
        """Reduce `op` over `axis`; reduced axes keep size 1."""
        return OPERATIONS.reduce(self, op, checks.check_reduce(op, axis, self.shape, self.device))

    def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
        """CAST (value conversion) or BITCAST (reinterpretation) to `dtype`."""
        dtype = checks.check_dtype("BITCAST" if bitcast else "CAST", dtype)
        if bitcast:  # validated even when the dtype is the same: bool, or itemsizes on the wrong device
            checks.check_bitcast(self.dtype, dtype, self.device, self.shape)
        else:
            checks.check_compute_device("CAST", self.device)
        if dtype == self.dtype:
            return self
        if not bitcast:
            return OPERATIONS.cast(self, dtype)
        ordering.check_fresh("BITCAST", self)
        return OPERATIONS.bitcast(self, dtype)

    def contiguous(self) -> LazyBuffer:
        """A buffer laid out contiguously: self, a zero-copy VIEW, or a CONTIGUOUS op."""
        return OPERATIONS.contiguous(self)

    def copy_to_device(self, device: str, force: bool = False) -> LazyBuffer:
        """This buffer on `device` (see SPEC §4 for the simplifications)."""
        device = Device.canonicalize(device)
        ordering.check_fresh("COPY", self)
        return OPERATIONS.copy_to_device(self, device, force)

    def assign(self, x: LazyBuffer) -> LazyBuffer:
        """Write `x` into this (realized) buffer's memory when realized; returns the ASSIGN node (a
        zero-size target, having nothing to write, is returned itself)."""
        return OPERATIONS.assign(self, checks.check_assign(self, x, LazyBuffer))

    def gather(self, indices: LazyBuffer, axis: int) -> LazyBuffer:
        """x[..., indices[i...], ...] along `axis` (fast/graph/gather.py; docs/semantics.md "Gather")."""
        idx, checked = checks.check_gather(self, indices, axis, LazyBuffer)
        return OPERATIONS.gather(self, idx, checked)

    def matmul(self, other: LazyBuffer) -> LazyBuffer:
        """self (..., M, K) @ other (..., K, N): the expand-multiply-sum of fast/graph/products.py."""
        right, batch = checks.check_matmul(self, other, LazyBuffer)
        return OPERATIONS.matmul(self, right, batch)

    # ------------------------------------------------------------ movement (views, never copies)

    def reshape(self, shape: tuple[sint, ...]) -> LazyBuffer:
        new_shape = checks.check_reshape(self.shape, shape)
        return self if new_shape == self.shape else move(self, ShapeTracker.reshape, new_shape)

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        pairs = checks.check_pad(self.shape, arg)
        return self if pairs.count((0, 0)) == len(pairs) else move(self, ShapeTracker.pad, pairs)

    def expand(self, shape: tuple[sint, ...]) -> LazyBuffer:
        new_shape = checks.check_expand(self.shape, shape)
        return self if new_shape == self.shape else move(self, ShapeTracker.expand, new_shape)

    def permute(self, order: tuple[int, ...]) -> LazyBuffer:
        checked = checks.check_permute(self.shape, order)
        return self if checked == tuple(range(len(checked))) else move(self, ShapeTracker.permute, checked)

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
        pairs = checks.check_shrink(self.shape, arg)
        whole = all(p == (0, size) for p, size in zip(pairs, self.shape, strict=True))
        return self if whole else move(self, ShapeTracker.shrink, pairs)

    def stride(self, steps: tuple[int, ...]) -> LazyBuffer:
        checked = checks.check_stride(self.shape, steps)
        return self if checked.count(1) == len(checked) else move(self, ShapeTracker.stride, checked)


# ---------------------------------------------------------------- node construction

def create(device: str, st: ShapeTracker, dtype: DType, op: Op | None = None, arg: Any = None,
            srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None) -> LazyBuffer:
    """The node for (device, st, dtype, op, arg, srcs) or the view of `base` through `st`, cached."""
    if 0 in st.views[-1].shape:
        op, arg, srcs, base = LOAD_CONST, normalized(0, dtype), (), None
        st = tracker(st.shape)
    if not config.CONFIG.lazycache or op is LOAD_EMPTY or op is LOAD_CUSTOM or op is LOAD_ASSIGN:
        return LazyBuffer(device, st, dtype, op, arg, srcs, base)
    versions: tuple[int, ...] | None = None
    bound = bound_values(st) if st.symbolic else ()
    if base is not None:
        key: tuple[Any, ...] = ("view", st, weakref.ref(base), ordering.expected_version(base), bound)
    else:
        # sources by weak reference, never by id(): the engine drops a realized node's srcs, so a
        # source may die while the cached node lives on, and its id may be reused by a new buffer.
        # The op by id(): enum members live as long as the process, and Enum's __hash__ is slow Python
        versions = ordering.read_versions(op, srcs)  # type: ignore[arg-type]
        key = (device, st, dtype, id(op), arg if arg is None or type(arg) is int else arg_key(arg), versions, bound,
               *map(weakref.ref, srcs))
    holder = _CACHE.setdefault(key, [None])
    ref = holder[0]
    if ref is not None and (hit := ref()) is not None:
        return hit
    try:
        ret = LazyBuffer(device, st, dtype, op, arg, srcs, base, versions)
    except BaseException:
        if holder[0] is None:
            _CACHE.pop(key, None)  # nothing was made: no entry stays behind
        raise
    ret.cache_key = key
    holder[0] = weakref.ref(ret)
    return ret


def cached_node(key: tuple[Any, ...]) -> LazyBuffer | None:
    """The live node the weak cache holds under `key`, if any (for tests and debugging)."""
    holder = _CACHE.get(key)
    ref = holder[0] if holder is not None else None
    return ref() if ref is not None else None


def forget_cached(lb: LazyBuffer) -> None:
    """Drop `lb` from the weak cache (an assign target: its memory no longer holds its op's value)."""
    key = lb.cache_key
    if key is not None and cached_node(key) is lb:
        del _CACHE[key]
    lb.cache_key = None


def _aliasing_buffer(device: str, shape: tuple[sint, ...], dtype: DType, op: Op, arg: Any,
                     srcs: tuple[LazyBuffer, ...]) -> Buffer:
    """The Buffer of a base aliasing a source's memory: the target's for ASSIGN, a zero-copy view of
    the source's for VIEW (at byte offset `arg`)."""
    if op is LOAD_ASSIGN:
        return srcs[1].base.buffer
    return Buffer(device, max_size(shape), dtype, base=srcs[0].base.buffer, offset=arg)


_SCALAR = tracker(())


def const_node(device: str, dtype: DType, value: ConstType, shape: tuple[sint, ...],
               is_normalized: bool = False) -> LazyBuffer:
    """A scalar CONST base broadcast to `shape` (no device check: internal). The broadcast view
    has no mask and differs from the scalar's shape, so it is built without `view_of`'s tests (a
    zero-size shape still becomes a CONST 0 in `create`)."""
    scalar = create(device, _SCALAR, dtype, LOAD_CONST, value if is_normalized else normalized(value, dtype))
    if not shape:
        return scalar
    return create(device, broadcast_tracker(shape), dtype, base=scalar)


def view_of(base: LazyBuffer, st: ShapeTracker) -> LazyBuffer:
    """`base` read through `st` (relative to base): the base itself, a constant 0, or a view node.
    (A hot path of movement ops: the tracker's properties are read inline.)"""
    last = st.views[-1]
    shape = last.shape
    if 0 in shape:
        return create(base.device, st, base.dtype, LOAD_CONST, 0)
    if last.mask is not None and last.all_invalid and not checks.is_disk(base.device):
        return const_node(base.device, base.dtype, 0, shape)
    if last.contiguous and len(st.views) == 1 and shape == base.shape:
        return base
    return create(base.device, st, base.dtype, base=base)


def reapply(lb: LazyBuffer, st: ShapeTracker) -> LazyBuffer:
    """`lb` read through the further view `st` (whose input shape is lb.shape)."""
    return view_of(lb, st) if lb.base is lb else view_of(lb.base, lb.st + st)


def redirect(lb: LazyBuffer) -> LazyBuffer:
    """Read an unrealized base through its live contiguous child instead (SPEC §4, contiguous())."""
    base = lb._base or lb
    if base.contiguous_child is None or (base._buffer is not None and base._buffer.is_allocated()):
        return lb
    child_ref, inverted = base.contiguous_child
    child = child_ref()
    return lb if child is None else view_of(child, inverted + lb.st)


def move(lb: LazyBuffer, apply: Callable[[ShapeTracker, Any], ShapeTracker], arg: Any) -> LazyBuffer:
    """`lb` moved by the tracker method `apply` with the validated argument `arg`, as a view of its
    base (or of the base's live contiguous child: `redirect`)."""
    base = lb._base or lb
    if base.contiguous_child is not None:
        lb = redirect(lb)
        base = lb._base or lb
    return view_of(base, apply(lb.st, arg))
