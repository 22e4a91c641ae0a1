"""Call replay for uncaptured code: a repeated sequence of namespace calls runs as one captured plan.

A *tape* is the sequence of top-level calls of the namespace functions in `TAPED` made on one thread
since the last read-back, each as a key: the function's name, its array arguments (an earlier
call's result, by position on the tape, or an *external*: an array from elsewhere, by first-use
number, shape, dtype, device and view) and its other arguments (Python scalars by type and bits,
dtypes, tuples, slices). Calls made inside a namespace function are not taped.

Recording. The first time, every call runs as usual and is taped; the read-back (`__array__`, hence
`bool()`, `float()`, `repr` ...) of a taped result stores the tape (an *episode*, found by its first
key) with that read-back point (tape length, result position).

Speculation. A tape whose first call's key starts a stored episode *speculates*: while each call's
key equals the episode's next one, the call builds nothing and returns a `Deferred` array that
knows only its shape, dtype and device (taken from the episode: equal keys, equal results). At a
read-back point stored in the episode the whole tape runs as one plan of the backend's capture
(`fast.jit`, fast/captured.py) over the externals, whose first run traces the tape's calls and whose
later runs replay its kernels: nothing is built, scheduled or looked up.

Invariant: a program sees the same values and errors as without tapes. Anything else ends
speculation first by *materializing* the tape (running every taped call as usual, in order, on the
same external LazyBuffers, and giving each live Deferred its LazyBuffer): a call whose key differs
or cannot be made (another function, an unrealized or sharded external, an array inside an index, a
NumPy scalar ...), reading `_lb` (`.lazy`, in-place operators, any function outside `TAPED`), a
read-back at another point, and a gather whose indices fail the range check the eager path makes
(`take` is taped only with indices that are an external or a reshape of one; their values are
checked before the plan runs, and a bad one materializes, so the eager path raises its IndexError).
Equal keys give equal graphs up to the externals' buffers: a taped function reads nothing but its
arguments, externals are realized (never folded as constants), and the capture's results are
bit-identical to the uncaptured run. Only namespaces given a capture (`enable`) tape.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from fast.xp._array import Array

TAPED = frozenset((
    "abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_invert bitwise_left_shift bitwise_or "
    "bitwise_right_shift bitwise_xor ceil clip copysign cos cosh divide equal exp expm1 floor floor_divide "
    "greater greater_equal hypot isfinite isinf isnan less less_equal log log1p log2 log10 logaddexp "
    "logical_and logical_not logical_or logical_xor maximum minimum multiply negative not_equal positive pow "
    "remainder round sign signbit sin sinh sqrt square subtract tan tanh trunc astype take matmul "
    "matrix_transpose tensordot vecdot broadcast_to concat expand_dims flip moveaxis permute_dims reshape "
    "roll squeeze stack tile where max mean min prod std sum var all any _getitem").split())
MAX_EPISODES = 16  # stored episodes (LRU); each holds its captures' plans
MAX_TAPE = 4096  # a tape longer than this (a graph never read back) stops recording
_SCALARS = (bool, int, float, str, type(None))
_NO_KWARGS: dict[str, Any] = {}
_LOCAL = threading.local()  # `tape`: this thread's tape; `depth`: namespace calls in progress
_JITS: dict[int, Callable[[Callable[..., Any]], Any]] = {}  # id(namespace) -> its backend's capture
_EPISODES: OrderedDict[Any, Episode] = OrderedDict()


class _Ref:
    """An array argument in a taped call's template: an earlier result ("t") or an external ("x"),
    and its part of the call's key."""

    __slots__ = ("kind", "index", "key")

    def __init__(self, kind: str, index: int, more: tuple[Any, ...] = ()) -> None:
        self.kind, self.index, self.key = kind, index, (kind, index, *more)


class Episode:
    """A recorded tape: its keys, each result's (shape, dtype, device), the read-back points seen
    (point -> its capture, None until built), the `take` index checks (external, axis size)."""

    def __init__(self, keys: list[Any], metas: list[Any], checks: list[tuple[int, int]]) -> None:
        self.keys, self.metas, self.checks = keys, metas, checks
        self.points: dict[tuple[int, int], Any] = {}


class Tape:
    """One thread's taped calls since the last read-back (module docstring). `episode` is set while
    speculating; `done` once the tape stops taping (it may still materialize later)."""

    def __init__(self, ns: Any) -> None:
        self.ns = ns
        self.keys: list[Any] = []
        self.templates: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.externals: list[Any] = []  # the externals' LazyBuffers, by number
        self.numbers: dict[int, _Ref] = {}  # id(external LazyBuffer) -> its reference
        self.produced: dict[int, tuple[int, weakref.ref[Any]]] = {}  # recording: id(result lb) -> position, lb
        self.metas: list[Any] = []
        self.checks: list[tuple[int, int]] = []
        self.deferred: list[weakref.ref[Deferred]] = []
        self.episode: Episode | None = None
        self.done = self.materialized = False
        self.lock = threading.Lock()

    # ------------------------------------------------------------ keys

    def encode(self, value: Any, template: list[Any], arrays: bool = True) -> Any:
        """The key of one argument (appending its template to `template`), or raise _UntapedError."""
        kind = type(value)
        if kind is Deferred and arrays and value.tape is self and not self.materialized:
            template.append(value.ref)
            return value.ref.key
        if kind is float:
            template.append(value)
            return (float, value.hex())
        if kind in _SCALARS:
            template.append(value)
            return (kind, value)
        if isinstance(value, Array) and arrays:
            return self._array_key(value, template)
        if kind is tuple or kind is list:
            inner: list[Any] = []
            key = (kind, *[self.encode(item, inner, arrays) for item in value])
            template.append(kind(inner))
            return key
        if kind is slice:
            parts: list[Any] = []
            key = (slice, *[self.encode(part, parts, False) for part in (value.start, value.stop, value.step)])
            template.append(slice(*parts))
            return key
        if value is Ellipsis:
            template.append(value)
            return (Ellipsis,)
        if self.ns._backend.is_dtype(value):
            template.append(value)
            return ("dtype", value.name)
        raise _UntapedError

    def _array_key(self, value: Array, template: list[Any]) -> Any:
        lb = value._lb
        known = self.numbers.get(id(lb))  # (the externals list keeps each numbered lb alive)
        if known is not None:
            template.append(known)
            return known.key
        if value._ns is not self.ns:
            raise _UntapedError
        found = self.produced.get(id(lb))
        if found is not None and found[1]() is lb:
            template.append(_Ref("t", found[0]))
            return ("t", found[0])
        device = lb.device
        if type(device) is not str or device.startswith("DISK") or lb.base.realized is None:
            raise _UntapedError
        ref = _Ref("x", len(self.externals), (lb.dtype, device, lb.shape if lb.base is lb else lb.st))
        self.numbers[id(lb)] = ref
        self.externals.append(lb)
        template.append(ref)
        return ref.key

    def call_key(self, fname: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """(key, template) of a call, or None when it cannot be taped."""
        template: list[Any] = []
        encode = self.encode
        try:
            if fname == "_getitem":  # an array inside an index reads values: never taped
                return (fname, encode(args[0], template), encode(args[1], template, False)), \
                    (fname, tuple(template), _NO_KWARGS)
            key = (fname, *[encode(arg, template) for arg in args])
            if not kwargs:
                return key, (fname, tuple(template), _NO_KWARGS)
            named: list[Any] = []
            names = sorted(kwargs)
            key = (*key, *[(name, encode(kwargs[name], named)) for name in names])
        except _UntapedError:
            return None
        return key, (fname, tuple(template), dict(zip(names, named, strict=True)))

    # ------------------------------------------------------------ materializing

    def substitute(self, value: Any, results: list[Any], externals: list[Any]) -> Any:
        """A template argument with its _Refs replaced by arrays over `results` and `externals`."""
        if type(value) is _Ref:
            return Array(results[value.index] if value.kind == "t" else externals[value.index], self.ns)
        if type(value) is tuple or type(value) is list:
            return type(value)(self.substitute(item, results, externals) for item in value)
        return value

    def run(self, count: int, externals: list[Any]) -> list[Any]:
        """The LazyBuffers of the first `count` calls, run as usual over `externals`."""
        results: list[Any] = []
        with _Nested():
            for fname, args, kwargs in self.templates[:count]:
                out = getattr(self.ns, fname)(*[self.substitute(a, results, externals) for a in args],
                                              **{k: self.substitute(v, results, externals) for k, v in kwargs.items()})
                results.append(out._lb)
        return results

    def materialize(self) -> None:
        """Stop taping; give every live Deferred its LazyBuffer (running the calls as usual)."""
        with self.lock:
            self.stop()
            if self.materialized or self.episode is None:
                self.materialized = True
                return
            self.materialized = True
            results = self.run(len(self.templates), self.externals)
            for ref, lb in zip(self.deferred, results, strict=True):
                array = ref()
                if array is not None and not array.has_lb():
                    array._lb = lb

    def stop(self) -> None:
        """Tape no further calls (this thread's next call starts a new tape)."""
        self.done = True
        if getattr(_LOCAL, "tape", None) is self:
            _LOCAL.tape = None


class _UntapedError(Exception):
    """An argument a key cannot describe."""


class _Nested:
    """Marks namespace calls in progress on this thread: calls inside them are not taped."""

    def __enter__(self) -> None:
        _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _LOCAL.depth -= 1


_LB_SLOT = Array.__dict__["_lb"]  # the slot descriptor: reading it never calls __getattr__


class Deferred(Array):
    """A taped call's result while its tape speculates: shape, dtype and device only. Reading `_lb`
    materializes its tape (module docstring); a read-back at a stored point runs the episode's plan."""

    __slots__ = ("tape", "ref", "meta")

    def __init__(self, ns: Any, tape: Tape, index: int, meta: tuple[tuple[int, ...], Any, str]) -> None:
        self._ns, self.tape, self.ref, self.meta = ns, tape, _Ref("t", index), meta

    @property
    def index(self) -> int:
        return self.ref.index

    def has_lb(self) -> bool:
        """Whether this array has its LazyBuffer (materialized, or read back through a plan)."""
        try:
            _LB_SLOT.__get__(self, Deferred)
        except AttributeError:
            return False
        return True

    def __getattr__(self, name: str) -> Any:
        if name != "_lb":
            raise AttributeError(f"'Deferred' object has no attribute {name!r}")
        self.tape.materialize()
        return _LB_SLOT.__get__(self, Deferred)

    @property
    def dtype(self) -> Any:
        return self.meta[1]

    @property
    def device(self) -> str:
        return self.meta[2]

    @property
    def sharding(self) -> None:
        return None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.meta[0]

    @property
    def ndim(self) -> int:
        return len(self.meta[0])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is not False and not self.has_lb():
            from fast.xp._tape_hooks import read_planned  # (the hooks module imports this one)

            read_planned(self)
        return Array.__array__(self, dtype, copy)
