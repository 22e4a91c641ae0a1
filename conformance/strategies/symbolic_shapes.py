"""The symbolic-shape model of symbolic programs (strategies/symbolic.py): variables and bindings,
each value's shape as `Dim`s, and movement arguments valid for every value of the variables.

A `Dim` is an int, a `Lin` (`var + c` or `c - var`: what shrink and pad make of a variable) or an
`Opaque` size (a variable axis strided by |k| > 1, equal only to itself). Invariants: an argument
names a size only as an int or a plain variable (`named`); every argument drawn here is valid for
every value of its variables in `[low, high]`; every size is positive when each variable is strictly
inside its range (the first binding), and no int size is ever 0.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from conformance.analysis import Info
from conformance.program import Var
from conformance.strategies.actions import random_reshape
from conformance.strategies.builder import Builder
from conformance.vocab import canonical_device

NAMES = ("n", "m")


@dataclass(frozen=True)
class Lin:
    """The size `coef * var + const` (coef 1 or -1); plain when it is the variable itself."""

    var: Var
    coef: int = 1
    const: int = 0

    @property
    def plain(self) -> bool:
        return self.coef == 1 and self.const == 0


class Opaque:
    """A size no argument can name (a variable axis strided by |k| > 1); equal only to itself."""


Dim = int | Lin | Opaque
Dims = tuple[Dim, ...]


def named(dim: Dim) -> int | Var | None:
    """How an argument names `dim`: the int, the plain variable, or None (it cannot)."""
    if isinstance(dim, int):
        return dim
    return dim.var if isinstance(dim, Lin) and dim.plain else None


def nameable(dims: Dims) -> bool:
    return all(named(d) is not None for d in dims)


def names(dims: Dims) -> tuple[Any, ...]:
    """The argument naming every size of `dims` (all nameable)."""
    return tuple(named(d) for d in dims)


def grow(dim: Dim, amount: int) -> Dim:
    """`dim + amount` (a new Opaque size when `dim` is opaque and amount is not 0)."""
    if amount == 0:
        return dim
    if isinstance(dim, int):
        return dim + amount
    return Lin(dim.var, dim.coef, dim.const + amount) if isinstance(dim, Lin) else Opaque()


class Sym:
    """The builder, the program's variables and the symbolic shape of every value made so far."""

    def __init__(self, b: Builder, variables: Sequence[Var]) -> None:
        self.b, self.variables = b, tuple(variables)
        self.dims: dict[int, Dims] = {}
        self.device = b.device()

    def add(self, step: Any, dims: Dims, pooled: bool = True) -> int:
        index = self.b.add(step, pooled)
        self.dims[index] = dims
        return index

    def info(self, index: int) -> Info:
        return self.b.info(index)

    def pick(self, predicate: Callable[[int], bool]) -> int | None:
        """A pool value satisfying predicate (recent ones more likely), or None."""
        found = [i for i in self.b.pool if i in self.dims and predicate(i)]
        if not found:
            return None
        return self.b.choose(found[-3:] if self.b.chance(0.6) else found)

    def same_place(self, a: int, b: int) -> bool:
        return canonical_device(self.info(a).device) == canonical_device(self.info(b).device)


# ------------------------------------------------------------ variables and bindings

def declare(b: Builder) -> list[Var]:
    """One or two variables and two or three bindings, set on the builder (first value interior)."""
    variables = []
    for name in NAMES[:2 if b.chance(0.25) else 1]:
        low = 0 if b.chance(0.2) else b.integer(1, 3)
        variables.append(Var(name, low, low + b.integer(2, 6)))
    runs = b.integer(2, 3)
    columns = []
    for var in variables:
        values = [b.integer(var.low + 1, var.high - 1)]
        while len(values) < runs:  # the edges first: shrinking heads for them
            values.append(b.choose([x for x in (var.low, var.high, *range(var.low, var.high)) if x not in values]))
        columns.append(values)
    b.variables = tuple(variables)
    b.bindings = tuple(tuple(column[run] for column in columns) for run in range(runs))
    return variables


def draw_dims(s: Sym) -> Dims:
    """A shape of rank 1-3 with at least one plain variable and ints 1-5 elsewhere."""
    rank = s.b.integer(1, 3)
    forced = s.b.integer(0, rank - 1)
    dims: list[Dim] = []
    for axis in range(rank):
        if axis == forced or s.b.chance(0.25):
            dims.append(Lin(s.b.choose(s.variables)))
        else:
            dims.append(s.b.integer(1, 5))
    return tuple(dims)


def reduce_axes(s: Sym, dims: Dims) -> tuple[int, ...]:
    """One or two axes to reduce, a symbolic one most of the time."""
    symbolic = [a for a, d in enumerate(dims) if not isinstance(d, int)]
    first = s.b.choose(symbolic) if symbolic and s.b.chance(0.7) else s.b.integer(0, len(dims) - 1)
    second = s.b.integer(0, len(dims) - 1)
    return tuple(sorted({first, second} if s.b.chance(0.3) else {first}))


def reduced(dims: Dims, axes: tuple[int, ...]) -> Dims:
    return tuple(1 if a in axes else d for a, d in enumerate(dims))


# ------------------------------------------------------------ movement arguments

def reshape_arg(s: Sym, dims: Dims) -> Dims:
    """Same element count: the int sizes regrouped, the variables kept in order among them."""
    ints = math.prod(d for d in dims if isinstance(d, int))
    out: list[Dim] = list(random_reshape(s.b, (ints,)))
    position = 0
    for dim in (d for d in dims if not isinstance(d, int)):
        position = s.b.integer(position, len(out))
        out.insert(position, dim)
        position += 1
    return tuple(out)


def shrink_pair(s: Sym, dim: Dim) -> tuple[tuple[Any, Any], Dim]:
    """A range of a nameable axis valid for every binding, and the size it leaves."""
    if isinstance(dim, int):
        fitting = [v for v in s.variables if v.high <= dim]
        if fitting and s.b.chance(0.4):
            var = s.b.choose(fitting)
            return ((0, var), Lin(var)) if s.b.chance(0.5) else ((var, dim), Lin(var, -1, dim))
        start = s.b.integer(0, dim - 1)
        end = s.b.integer(start + 1, dim)
        return (start, end), end - start
    assert isinstance(dim, Lin)
    var = dim.var
    cut = s.b.integer(1, var.low) if var.low >= 1 and s.b.chance(0.5) else 0
    if cut and s.b.chance(0.5):
        return (0, cut), cut
    return (cut, var), Lin(var, 1, -cut)


def pad_pair(s: Sym, dim: Dim) -> tuple[tuple[Any, Any], Dim]:
    """Padding amounts (a variable one, on an int axis, only when the variable is never 0)."""
    usable = [v for v in s.variables if v.low >= 1]
    if isinstance(dim, int) and usable and s.b.chance(0.25):
        var = s.b.choose(usable)
        return ((var, 0) if s.b.chance(0.5) else (0, var)), Lin(var, 1, dim)
    before, after = s.b.integer(0, 2), s.b.integer(0, 2)
    return (before, after), grow(dim, before + after)


def stride_step(s: Sym, dim: Dim) -> tuple[int, Dim]:
    step = s.b.choose((1, -1, 2, -2, 3))
    if abs(step) == 1:
        return step, dim
    return step, len(range(0, dim, abs(step))) if isinstance(dim, int) else Opaque()


def expand_arg(s: Sym, dims: Dims) -> Dims:
    """Size-1 axes broadcast to an int or a plain variable."""
    return tuple(d if d != 1 or s.b.chance(0.3) else
                 (Lin(s.b.choose(s.variables)) if s.b.chance(0.6) else s.b.integer(2, 4)) for d in dims)


def movement(s: Sym, kind: str, dims: Dims) -> tuple[tuple[Any, ...], Dims] | None:
    """(argument, new symbolic shape) of movement `kind` on `dims`, or None when none is valid."""
    if kind in ("reshape", "shrink", "expand") and not nameable(dims):
        return None
    if kind == "reshape":
        new = reshape_arg(s, dims)
        return names(new), new
    if kind == "permute":
        order = tuple(s.b.draw(st.permutations(range(len(dims)))))
        return order, tuple(dims[a] for a in order)
    if kind == "expand":
        new = expand_arg(s, dims)
        return (names(new), new) if 1 in dims else None
    pairs = [shrink_pair(s, d) if kind == "shrink" else pad_pair(s, d) if kind == "pad" else stride_step(s, d)
             for d in dims]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
