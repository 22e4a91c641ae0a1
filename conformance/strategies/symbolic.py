"""Symbolic programs: shapes and movement arguments hold bound Variables, and the same program is
replayed under several bindings (the runner compares each binding with reference and checks that
fast builds no kernel after the first).

`build(b)` declares one variable (sometimes two), `Var(name, low, high)` with `0 <= low` and
`high - low >= 2`, and two or three distinct bindings, the first strictly inside `(low, high)`
(symbolic_shapes.py). It makes values whose shapes hold the variables (windows of leaves, `CONST`,
`CUSTOM`, `const(value, shape)`) and runs the actions below on them, tracking each value's symbolic
shape as `Dim`s. For about `cfg.p_invalid` of programs the last step is invalid in every binding.

Invariants:
- every step is valid for every value of its variables in `[low, high]`, not only the drawn ones;
- an argument names a size only as an int or a plain variable (reference takes bound Variables, not
  expressions of them), so shrink, reshape and expand apply only to values whose sizes are all
  nameable; elementwise operands have equal `Dim` shapes, so their sizes agree in every binding;
- every size is positive in the first binding, so it runs every kernel of the program and a kernel
  built in a later binding is a failure of reuse, not an artefact of an empty first run;
- a variable pads an axis only when `low >= 1` (Infos come from the first binding: a pad that is empty
  in another binding would leave a padded constant unmasked there).
"""
from __future__ import annotations

import math
from collections.abc import Callable

from conformance.program import (
    Assign,
    Cast,
    ConstLike,
    Contiguous,
    Copy,
    Custom,
    Elementwise,
    LoadConst,
    Movement,
    Program,
    Realize,
    Reduce,
    Var,
)
from conformance.strategies.actions import ROW_OPS, binary_ops, unary_ops
from conformance.strategies.builder import Builder
from conformance.strategies.data import const_values, random_data
from conformance.strategies.symbolic_shapes import (
    Dims,
    Lin,
    Sym,
    declare,
    draw_dims,
    movement,
    nameable,
    named,
    names,
    reduce_axes,
    reduced,
)
from conformance.vocab import COMPARE, DTYPES, FLOATS, bitcast_partners, supports

# ------------------------------------------------------------ values with symbolic shapes

def window(s: Sym, dtype: str, dims: Dims, device: str) -> int:
    """Fresh data of shape `dims` (nameable): a leaf with each variable's axis sized for its largest
    value (sometimes more), shrunk to `(0, var)` there (random data past `cfg.max_elements`)."""
    highs = [d if isinstance(d, int) else d.high for d in map(named, dims) if d is not None]
    sizes = tuple(size + (0 if isinstance(d, int) else s.b.integer(0, 2)) for d, size in zip(dims, highs, strict=True))
    sizes = sizes if math.prod(sizes) <= s.b.cfg.max_elements else tuple(highs)
    data = s.b.draw(random_data(dtype, sizes)) if math.prod(sizes) > s.b.cfg.max_elements else None
    leaf = s.b.leaf(dtype, sizes, device, data=data)
    s.dims[leaf] = sizes
    if all(isinstance(d, int) for d in dims):
        return leaf
    return s.add(Movement(leaf, "shrink", tuple((0, named(d)) for d in dims)), dims)


def act_source(s: Sym) -> bool:
    """A new value with symbolic sizes: a window of data, a CONST, a CUSTOM or `x.const(v, shape)`."""
    dims, kind = draw_dims(s), s.b.choose(("window", "window", "const", "custom", "const-like"))
    dtype, like = s.b.choose(DTYPES), s.pick(lambda i: not s.info(i).disk) if kind == "const-like" else None
    if kind == "const":
        s.add(LoadConst(names(dims), dtype, s.device, s.b.draw(const_values(dtype))), dims)
    elif kind == "custom":
        fn, dtype = s.b.choose(("arange", "fill3")), s.b.choose([d for d in DTYPES if d != "bool"])
        s.add(Custom(fn, (), names(dims), dtype, s.device), dims)
    elif like is not None:
        s.add(ConstLike(like, s.b.draw(const_values(s.info(like).dtype)), names(dims)), dims)
    else:  # a window (also when there is nothing to take a constant from yet)
        window(s, dtype, dims, s.device)
    return True


def act_reversed(s: Sym) -> bool:
    """A window `(var, S)` of a leaf axis of size S >= high: the size `S - var` (an offset that moves)."""
    var = s.b.choose(s.variables)
    size = var.high + s.b.integer(0, 2)
    other = s.b.integer(1, 4)
    leaf = s.b.leaf(s.b.choose(DTYPES), (size, other), s.device)
    s.dims[leaf] = (size, other)
    s.add(Movement(leaf, "shrink", ((var, size), (0, other))), (Lin(var, -1, size), other))
    return True


def partner(s: Sym, x: int, exact: bool = False, sign_safe: bool = False) -> int:
    """A second operand for an op with `x`: equal symbolic shape, dtype and device."""
    me, dims = s.info(x), s.dims[x]

    def fits(i: int) -> bool:
        info = s.info(i)
        return (s.dims[i] == dims and info.dtype == me.dtype and s.same_place(i, x) and not info.disk
                and not (exact and info.approx) and not (sign_safe and info.zero_sign))
    choice = s.b.choose(("self", "pool", "fresh", "const"))
    if choice == "self" and fits(x):
        return x
    found = s.pick(fits) if choice == "pool" else None
    if found is not None:
        return found
    if choice in ("fresh", "pool") and nameable(dims):
        return window(s, me.dtype, dims, me.device)
    return s.add(ConstLike(x, s.b.draw(const_values(me.dtype))), dims)


def bool_like(s: Sym, x: int) -> int:
    """A bool condition with the symbolic shape and device of `x`."""
    me, dims = s.info(x), s.dims[x]
    found = s.pick(lambda i: s.info(i).dtype == "bool" and s.dims[i] == dims and s.same_place(i, x))
    if found is not None and s.b.chance(0.5):
        return found
    if not me.approx and me.dtype != "bool" and s.b.chance(0.5):
        return s.add(Elementwise(s.b.choose(("CMPLT", "CMPEQ")), (x, partner(s, x, exact=True))), dims)
    if nameable(dims):
        return window(s, "bool", dims, me.device)
    return s.add(Cast(s.add(ConstLike(x, s.b.choose((0, 1))), dims), "bool"), dims)


# ------------------------------------------------------------ compute actions

def computable(s: Sym) -> Callable[[int], bool]:
    return lambda i: not s.info(i).disk


def act_unary(s: Sym) -> bool:
    x = s.pick(lambda i: computable(s)(i) and bool(unary_ops(s.info(i))))
    if x is None:
        return False
    s.add(Elementwise(s.b.choose(unary_ops(s.info(x))), (x,)), s.dims[x])
    return True


def act_binary(s: Sym) -> bool:
    x = s.pick(lambda i: computable(s)(i) and bool(binary_ops(s.info(i))))
    if x is None:
        return False
    info = s.info(x)
    op = s.b.choose(binary_ops(info))
    other = partner(s, x, exact=op in COMPARE or op == "DIV", sign_safe=op == "DIV")
    swap = s.b.chance(0.5) and not (op == "DIV" and (info.approx or info.zero_sign))
    s.add(Elementwise(op, (other, x) if swap else (x, other)), s.dims[x])
    return True


def act_ternary(s: Sym) -> bool:
    x = s.pick(computable(s))
    if x is None:
        return False
    if supports("MULACC", s.info(x).dtype) and s.b.chance(0.4):
        y, z = partner(s, x), partner(s, x)
        s.add(Elementwise("MULACC", s.b.choose(((x, y, z), (y, x, z), (y, z, x)))), s.dims[x])
        return True
    cond, other = bool_like(s, x), partner(s, x)
    s.add(Elementwise("WHERE", (cond, x, other) if s.b.chance(0.5) else (cond, other, x)), s.dims[x])
    return True


def act_cast(s: Sym) -> bool:
    x = s.pick(computable(s))
    if x is None:
        return False
    info = s.info(x)
    if not info.approx and bitcast_partners(info.dtype) and s.b.chance(0.25):
        s.add(Cast(x, s.b.choose(bitcast_partners(info.dtype)), bitcast=True), s.dims[x])
        return True
    s.add(Cast(x, s.b.choose([d for d in DTYPES if not info.approx or d in FLOATS])), s.dims[x])
    return True


def act_reduce(s: Sym) -> bool:
    x = s.pick(lambda i: computable(s)(i) and len(s.dims[i]) > 0)
    if x is None:
        return False
    axes = reduce_axes(s, s.dims[x])
    s.add(Reduce(x, s.b.choose(("SUM", "MAX")), axes), reduced(s.dims[x], axes))
    return True


def act_row_chain(s: Sym) -> bool:
    """Reductions over symbolic rows read back along the rows (softmax- and layernorm-shaped)."""
    x = s.pick(lambda i: computable(s)(i) and len(s.dims[i]) > 0 and nameable(s.dims[i])
               and any(op in binary_ops(s.info(i)) for op in ROW_OPS))
    if x is None:
        return False
    info, dims = s.info(x), s.dims[x]
    axes = reduce_axes(s, dims)
    ops = [op for op in ROW_OPS if op in binary_ops(info) and (op != "DIV" or not info.approx)]
    value = x
    for _ in range(s.b.integer(1, 2)):
        row = s.add(Reduce(value, s.b.choose(("SUM", "MAX")), axes), reduced(dims, axes))
        back = s.add(Movement(row, "expand", names(dims)), dims)
        value = s.add(Elementwise(s.b.choose(ops), (value, back) if s.b.chance(0.7) else (back, value)), dims)
    return True


# ------------------------------------------------------------ movement

def act_movement(s: Sym) -> bool:
    x = s.pick(lambda i: True)
    if x is None:
        return False
    kind = s.b.choose(("shrink", "pad", "reshape", "permute", "expand", "stride"))
    dims = s.dims[x]
    if kind == "expand" and 1 not in dims and nameable(dims):
        position = s.b.integer(0, len(dims))
        dims = (*dims[:position], 1, *dims[position:])
        x = s.add(Movement(x, "reshape", names(dims)), dims)
    made = movement(s, kind, dims)
    if made is None:
        return False
    s.add(Movement(x, kind, made[0]), made[1])
    return True


# ------------------------------------------------------------ realization, copies, assign

def act_contiguous(s: Sym) -> bool:
    x = s.pick(computable(s))
    if x is None:
        return False
    s.add(Contiguous(x), s.dims[x])
    return True


def act_realize(s: Sym) -> bool:
    x = s.pick(lambda i: True)
    if x is None:
        return False
    s.b.add(Realize((x,)))
    return True


def act_copy(s: Sym) -> bool:
    x = s.pick(computable(s))
    if x is None:
        return False
    s.add(Copy(x, s.b.choose(s.b.cfg.single_devices())), s.dims[x])
    return True


def act_custom(s: Sym) -> bool:
    """A CUSTOM reading a symbolic value (compared exactly: only exact, sign-safe sources)."""
    x = s.pick(lambda i: computable(s)(i) and nameable(s.dims[i]) and not s.info(i).aux
               and not s.info(i).zero_sign)
    if x is None:
        return False
    info = s.info(x)
    s.add(Custom(s.b.choose(("copy", "flip")), (x,), names(s.dims[x]), info.dtype, info.device), s.dims[x])
    return True


def act_assign(s: Sym) -> bool:
    """Assign a value into a realized CUSTOM buffer of the same symbolic shape, then read it back."""
    x = s.pick(lambda i: computable(s)(i) and nameable(s.dims[i]) and s.info(i).dtype != "bool")
    if x is None:
        return False
    info, dims = s.info(x), s.dims[x]
    target = s.add(Custom(s.b.choose(("arange", "fill3")), (), names(dims), info.dtype, info.device), dims,
                   pooled=False)
    s.b.add(Realize((target,)))
    assigned = s.add(Assign(target, x), dims)
    s.b.add(Realize((assigned,)))
    return True


def beyond(s: Sym, dims: Dims) -> list[tuple[int, Var]]:
    """(axis, variable) pairs where an int axis is shorter than the variable in every binding."""
    lowest = {var: min(binding[i] for binding in s.b.bindings) for i, var in enumerate(s.variables)}
    return [(axis, var) for axis, d in enumerate(dims) if isinstance(d, int) for var in s.variables
            if lowest[var] > d]


def invalid_end(s: Sym) -> str | None:
    """A last step invalid in every binding, with its error type (bound Variables' values are used,
    docs/api.md): a shrink of an int axis to a variable longer than it in every binding, a shrink
    past a variable's axis, or a reshape that doubles the element count of a value whose variables
    are never 0. None when no value can take one."""
    x = s.pick(lambda i: nameable(s.dims[i]) and (bool(beyond(s, s.dims[i])) or
                                                  any(isinstance(d, Lin) for d in s.dims[i])))
    if x is None:
        return None
    dims = s.dims[x]
    whole = [(0, named(d)) for d in dims]
    variable_axes = [a for a, d in enumerate(dims) if isinstance(d, Lin)]
    kinds = ["beyond"] * bool(beyond(s, dims)) + ["past"] * bool(variable_axes)
    if variable_axes and all(d.var.low >= 1 for d in dims if isinstance(d, Lin)):
        kinds.append("count")
    kind = s.b.choose(kinds)
    if kind == "beyond":
        axis, var = s.b.choose(beyond(s, dims))
        whole[axis] = (0, var)
    elif kind == "past":
        axis = s.b.choose(variable_axes)
        whole[axis] = (0, dims[axis].var.high + s.b.integer(1, 2))  # type: ignore[union-attr]
    step = Movement(x, "reshape", (*names(dims), 2)) if kind == "count" else Movement(x, "shrink", tuple(whole))
    s.b.steps.append(step)  # the invalid last step has no Info (analysis.analyze)
    s.b.infos.append(None)
    return "ValueError"


ACTIONS: tuple[tuple[Callable[[Sym], bool], int], ...] = (
    (act_binary, 6), (act_movement, 6), (act_unary, 3), (act_reduce, 4), (act_source, 2), (act_ternary, 2),
    (act_cast, 2), (act_row_chain, 2), (act_reversed, 1), (act_contiguous, 1), (act_realize, 1), (act_copy, 1),
    (act_custom, 1), (act_assign, 1),
)


def build(b: Builder, ops: int | None = None) -> Program:
    """A symbolic program: variables and bindings, one or two sources, then `ops` actions (default:
    1 to `cfg.max_ops`), then fetches; for about `cfg.p_invalid` of programs an invalid last step."""
    s = Sym(b, declare(b))
    act_source(s)
    if b.chance(0.3):
        act_source(s)
    choices = [action for action, weight in ACTIONS for _ in range(weight)]
    for _ in range(ops if ops is not None else b.integer(1, b.cfg.max_ops)):
        for _attempt in range(3):
            if b.choose(choices)(s):
                break
    b.fetch_some()
    expect = invalid_end(s) if b.chance(b.cfg.p_invalid) else None
    return b.finish(expect=expect)
