"""Call replay for uncaptured code: a repeated sequence of namespace calls runs as one captured plan.

A *tape* is the sequence of top-level calls of the namespace functions in `TAPED` made on one thread
since the last read-back, each as a key: the function's name, its array arguments (an earlier
call's result, by position on the tape, or an *external*: an array from elsewhere, by first-use
number, shape, dtype, device and view) and its other arguments (Python scalars by type and bits,
dtypes, tuples, slices). Calls made inside a namespace function are not taped. A tape is taken
under one configuration (the `Host`'s `context`, None when taping is off: `FAST_XP_TAPE=0`, DEBUG>=2,
DUMP_IR, GRAPH, `fast.debug.trace()`), and episodes are kept per configuration.

Recording. The first time, every call runs as usual and is taped; the read-back (`__array__`, hence
`bool()`, `float()`, `repr` ...) of a taped result stores the tape (an *episode*, found by its first
key) with that read-back point (tape length, result position), unless the result shares memory
with what it was computed from (a view: its plan would return a copy).

Speculation. A tape whose first call's key starts a stored episode *speculates*: while each call's
key equals the episode's next one, the call builds nothing and returns a `Deferred` array that
knows only its shape, dtype and device (taken from the episode: equal keys, equal results). At a
read-back point stored in the episode, of the tape's only live Deferred, the whole tape runs as one
plan of the backend's capture (`fast.jit`, fast/captured.py) over the externals, whose first run
traces the tape's calls and whose later runs replay its kernels: nothing is built or scheduled.

Invariant: a program sees the same values and errors as without tapes. Anything else ends
speculation first by *materializing* the tape (running every taped call as usual, in order, on the
same external LazyBuffers, and giving each live Deferred its LazyBuffer), so the graph is the one
the calls would have built, built before anything could change what they read: a call whose key
differs or cannot be made (another function, an unrealized, stale or sharded external, an array
inside an index, a NumPy scalar ...), reading `_lb` (`.lazy`, in-place operators, any function
outside `TAPED`), a read-back elsewhere or while another Deferred of the tape lives, any `realize`
(an assign into an external's memory goes through one: the observer `settle`), a configuration
change (`config.override`), and a gather whose indices fail the range check the eager path makes
(`take` is taped only with indices that are an external or a reshape of one; their values are
checked before the plan runs, and a bad one materializes, so the eager path raises its IndexError).
Equal keys give equal graphs up to the externals' buffers: a taped function reads nothing but its
arguments and the configuration, externals are realized (never folded as constants), a call that
returns one of its arguments itself is never taped, and the capture's results are bit-identical to
the uncaptured run. Only namespaces given a `Host` (`enable`) tape.
"""
from __future__ import annotations

import struct
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
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
MAX_EPISODES = 16  # stored episodes (LRU); each holds its read-back points' plans
MAX_POINTS = 4  # read-back points (plans) kept per episode; later ones read back as usual
MAX_TAPE = 4096  # a tape longer than this (a graph never read back) stops recording
_SCALARS = (bool, int, str, type(None))
_DOUBLE = struct.Struct("<d")
_NO_KWARGS: dict[str, Any] = {}
_LOCAL = threading.local()  # `tape`: this thread's tape; `depth`: namespace calls in progress
_EPISODES: OrderedDict[Any, Episode] = OrderedDict()  # (context, first key) -> episode
EPISODES_LOCK = threading.Lock()
_SPECULATING: weakref.WeakSet[Tape] = weakref.WeakSet()  # tapes that may still have to materialize
_SPECULATING_LOCK = threading.Lock()


@dataclass(frozen=True)
class Host:
    """What call replay needs of a backend beyond its LazyBuffer API (fast/xp/__init__.py makes fast's):
    `jit` its capture; `context()` the configuration in force, or None when nothing may be taped now;
    `stale(lb)` whether a realized LazyBuffer aliases memory overwritten since it was built (building
    on it raises); `debug()` the DEBUG level (1: a line per plan run)."""

    jit: Callable[[Callable[..., Any]], Any]
    context: Callable[[], Any]
    stale: Callable[[Any], bool]
    debug: Callable[[], int]


HOSTS: dict[int, Host] = {}  # id(namespace) -> its host (`enable`)


class _Ref:
    """An array argument in a taped call's template: an earlier result ("t") or an external ("x"),
    and its part of the call's key."""

    __slots__ = ("kind", "index", "key")

    def __init__(self, kind: str, index: int, more: tuple[Any, ...] = ()) -> None:
        self.kind, self.index, self.key = kind, index, (kind, index, *more)


class Episode:
    """A recorded tape: its keys, each result's (shape, dtype, device), the read-back points seen
    (point -> its capture, None until built, False once it failed), the `take` index checks
    (external, axis size)."""

    def __init__(self, keys: list[Any], metas: list[Any], checks: list[tuple[int, int]]) -> None:
        self.keys, self.metas, self.checks = keys, metas, checks
        self.points: dict[tuple[int, int], Any] = {}
        # each result's reference, made once (a _Ref is immutable): every speculating tape's Deferreds share them
        self.refs = [_Ref("t", index) for index in range(len(keys))]


class Tape:
    """One thread's taped calls since the last read-back (module docstring). `episode` is set while
    speculating; `done` once the tape stops taping (it may still materialize later)."""

    def __init__(self, ns: Any, host: Host, context: Any) -> None:
        self.ns, self.host, self.context = ns, host, context
        self.keys: list[Any] = []
        self.templates: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.externals: list[Any] = []  # while speculating: the externals' LazyBuffers, by number
        self.shapes: list[tuple[int, ...]] = []  # the externals' shapes, by number
        self.numbers: dict[int, tuple[_Ref, weakref.ref[Any]]] = {}  # id(external lb) -> its reference
        self.produced: dict[int, tuple[int, weakref.ref[Any]]] = {}  # recording: id(result lb) -> position, lb
        self.results: dict[int, tuple[int, weakref.ref[Any], weakref.ref[Any]]] = {}  # id(result) -> position, it, lb
        self.metas: list[Any] = []
        self.checks: list[tuple[int, int]] = []
        self.deferred: list[weakref.ref[Deferred]] = []
        self.episode: Episode | None = None
        self.done = self.materialized = False
        self.lock = threading.Lock()

    def speculate(self, episode: Episode) -> None:
        """Start deferring calls along `episode` (a tape with no call yet, whose first call's key is made)."""
        self.episode = episode
        self.externals = [lb for _, lb in sorted((ref.index, alive()) for ref, alive in self.numbers.values())]
        with _SPECULATING_LOCK:
            _SPECULATING.add(self)

    # ------------------------------------------------------------ keys

    def encode(self, value: Any, template: list[Any], arrays: bool = True) -> Any:
        """The key of one argument (appending its template to `template`), or raise _UntapedError."""
        kind = type(value)
        if kind is Deferred and arrays and value.tape is self and not self.materialized:
            template.append(value.ref)
            return value.ref.key
        if kind is float:
            template.append(value)
            return (float, _DOUBLE.pack(value))  # by bits: -0.0 and NaN payloads are distinct
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
        result = self.results.get(id(value))  # (a call's result first: its LazyBuffer may be an external's)
        if result is not None and result[1]() is value and result[2]() is lb:
            template.append(_Ref("t", result[0]))
            return ("t", result[0])
        known = self.numbers.get(id(lb))
        if known is not None and known[1]() is lb:
            template.append(known[0])
            return known[0].key
        if value._ns is not self.ns:
            raise _UntapedError
        found = self.produced.get(id(lb))
        if found is not None and found[1]() is lb:
            template.append(_Ref("t", found[0]))
            return ("t", found[0])
        device = lb.device
        if type(device) is not str or device.startswith("DISK") or lb.base.realized is None:
            raise _UntapedError
        view = lb.shape if lb.base is lb else lb.st
        if getattr(view, "symbolic", False) or self.host.stale(lb):  # (building on a stale view raises)
            raise _UntapedError
        ref = _Ref("x", len(self.shapes), (lb.dtype, device, view))
        self.numbers[id(lb)] = (ref, weakref.ref(lb))
        self.shapes.append(tuple(lb.shape))
        if self.episode is not None:
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
            parts: list[Any] = [fname]
            for arg in args:  # (`encode`, with its most frequent case inline: an earlier result)
                if type(arg) is Deferred and arg.tape is self and not self.materialized:
                    template.append(arg.ref)
                    parts.append(arg.ref.key)
                else:
                    parts.append(encode(arg, template))
            key = tuple(parts)
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

    def waiting(self) -> list[tuple[int, Deferred]]:
        """The live Deferreds still without a LazyBuffer, with their positions."""
        found = []
        for position, ref in enumerate(self.deferred):
            array = ref()
            if array is not None and not array.has_lb():
                found.append((position, array))
        return found

    def materialize(self) -> None:
        """Stop taping; give every live Deferred its LazyBuffer (running the calls it needs as usual)."""
        with self.lock:
            self.stop()
            self.finish()
            if self.materialized or self.episode is None:
                self.materialized = True
                return
            self.materialized = True
            waiting = self.waiting()
            if waiting:
                results = self.run(waiting[-1][0] + 1, self.externals)
                for position, array in waiting:
                    array._lb = results[position]
            self.externals = []

    def finish(self) -> None:
        """Leave the tapes `settle` materializes (a plan gave the only live Deferred its value)."""
        with _SPECULATING_LOCK:
            _SPECULATING.discard(self)

    def stop(self) -> None:
        """Tape no further calls (this thread's next call starts a new tape)."""
        self.done = True
        if getattr(_LOCAL, "tape", None) is self:
            _LOCAL.tape = None


def settle(*_: Any) -> None:
    """Materialize every speculating tape (the engine calls this before each `realize`, the
    configuration before each change: what the deferred calls read cannot change before they are built)."""
    if not _SPECULATING:
        return
    with _SPECULATING_LOCK:
        tapes = list(_SPECULATING)
    for tape in tapes:
        tape.materialize()


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

    def __init__(self, ns: Any, tape: Tape, ref: _Ref, meta: tuple[tuple[int, ...], Any, str]) -> None:
        self._ns, self.tape, self.ref, self.meta = ns, tape, ref, meta

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
            READ_BACK(self)
        return Array.__array__(self, dtype, copy)


def _read_back_unset(array: Deferred) -> None:
    raise RuntimeError(f"fast.xp: {array!r} read back before fast/xp/_tape_hooks.py set READ_BACK")


#: How a Deferred is read back through its tape's plan: `read_planned` of fast/xp/_tape_hooks.py,
#: which sets this when imported (it imports this module; this one never imports it).
READ_BACK: Callable[[Deferred], None] = _read_back_unset
