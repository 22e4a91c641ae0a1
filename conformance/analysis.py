"""Static facts about each value of a program, derived from the steps alone (no package involved).

`Info` carries shape, dtype and placement, plus the flags that decide how a value is compared:
- `approx`: the value may legitimately differ by a positive tolerance (it passed through a
  transcendental or a float SUM); strategies never feed it to discontinuous ops.
- `aux`: the expected side builds a tolerance graph for it (approx, or unspecified elements).
- `zero_sign`: the sign of its zeros is unspecified (MAX(-0.0, 0.0), float SUM, shard summing).
- `payload`: the bits of its NaNs are defined (from data, bitcast or movement only).
- `const`: "const" for an unmasked, unrealized constant, "masked" once a constant is padded.
`infer(step, infos)` is total for the valid steps strategies emit; it raises ValueError for misuse
of sharding rules (so strategies can test a candidate step first).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from conformance import layout as lay
from conformance.layout import Layout, Shape
from conformance.program import (
    Assign,
    Cast,
    ConstLike,
    Contiguous,
    Copy,
    Custom,
    Elementwise,
    Fetch,
    Gather,
    Leaf,
    LoadConst,
    LoadEmpty,
    Movement,
    Program,
    Realize,
    Reduce,
    Shard,
    Step,
    StepVisitor,
    SymShape,
)
from conformance.vocab import FLOATS, ITEMSIZE, TRANSCENDENTAL, is_disk, result_dtype


@dataclass(frozen=True)
class Info:
    shape: Shape
    dtype: str
    device: str = ""
    layout: Layout | None = None
    approx: bool = False
    aux: bool = False
    zero_sign: bool = False
    payload: bool = True
    const: str = ""
    defined: bool = True
    consecutive: bool = True  # on DISK: the view reads one ascending run of whole elements

    @property
    def multi(self) -> bool:
        return self.layout is not None

    @property
    def disk(self) -> bool:
        return is_disk(self.device)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS


def _elementwise(step: Elementwise, srcs: list[Info]) -> Info:
    values = srcs[1:] if step.op == "WHERE" else srcs
    dtype = result_dtype(step.op, values[0].dtype)
    is_float = dtype in FLOATS
    approx = any(s.approx for s in srcs) or (step.op in TRANSCENDENTAL)
    layout = lay.elementwise([s.layout for s in srcs if s.layout is not None]) if srcs[0].multi else None
    # MAX(-0.0, 0.0) may give either zero; folding x+0 to x keeps the sign a kernel would drop
    folded_zero = step.op in ("ADD", "SUB", "MULACC") and any(s.const == "const" for s in srcs)
    return Info(
        shape=srcs[0].shape, dtype=dtype, device=srcs[0].device, layout=layout, approx=approx and is_float,
        aux=approx or any(s.aux for s in srcs),
        zero_sign=is_float and (any(s.zero_sign for s in values) or step.op == "MAX" or folded_zero),
        payload=False, const="const" if all(s.const == "const" for s in srcs) else "")


def _reduce(step: Reduce, src: Info) -> Info:
    shape = tuple(1 if i in step.axes else s for i, s in enumerate(src.shape))
    approx = src.approx or (step.op == "SUM" and src.is_float)
    layout = lay.reduce(src.layout, step.axes) if src.layout is not None else None
    return replace(src, shape=shape, layout=layout, approx=approx, aux=src.aux or approx,
                   zero_sign=src.is_float, payload=False,
                   const="const" if src.const == "const" else "")


def _movement(step: Movement, src: Info) -> Info:
    shape = lay.movement_shape(src.shape, step.kind, step.arg)
    layout = lay.movement(src.layout, src.shape, step.kind, step.arg, shape) if src.layout is not None else None
    const = "masked" if src.const and step.kind == "pad" and shape != src.shape else src.const
    consecutive = src.consecutive and stays_consecutive(step.kind, step.arg, src.shape, shape)
    return replace(src, shape=shape, layout=layout, const=const, consecutive=consecutive)


def stays_consecutive(kind: str, arg: tuple, shape: Shape, new: Shape) -> bool:  # type: ignore[type-arg]
    """Whether a movement keeps a consecutive view consecutive (docs/api.md, DISK); conservative."""
    if 0 in new or kind == "reshape":
        return True
    if kind == "shrink":
        cut = [i for i, (pair, size) in enumerate(zip(arg, shape, strict=True)) if pair != (0, size)]
        return not cut or (all(shape[i] == 1 for i in range(cut[0])) and cut == [cut[0]])
    if kind == "permute":
        moved = [a for a in arg if shape[a] > 1]
        return moved == sorted(moved)
    if kind == "stride":
        return all(step == 1 or size <= 1 for step, size in zip(arg, shape, strict=True))
    return new == shape  # expand or pad: only when nothing changed


def _cast(step: Cast, src: Info) -> Info:
    to_float = step.dtype in FLOATS
    if step.bitcast:
        taint = src.is_float and (not src.payload or src.zero_sign)
        size, new_size = ITEMSIZE[src.dtype], ITEMSIZE[step.dtype]
        shape = src.shape if size == new_size else (*src.shape[:-1], src.shape[-1] * size // new_size)
        return replace(src, dtype=step.dtype, shape=shape, aux=src.aux or taint, approx=False,
                       zero_sign=to_float and src.zero_sign and src.is_float,
                       payload=src.payload if src.is_float else True, const="")
    if src.is_float and not to_float:  # float -> int/bool: unspecified elements masked (to bool: exact)
        return replace(src, dtype=step.dtype, aux=src.aux or step.dtype != "bool", approx=False,
                       zero_sign=False, payload=True)
    return replace(src, dtype=step.dtype, approx=src.approx and to_float, zero_sign=src.zero_sign and to_float,
                   payload=not src.is_float)


def _copy(step: Copy, src: Info) -> Info:
    if src.layout is None:
        return replace(src, device=step.device, consecutive=True)
    summed = src.layout.axis is not None  # shards are padded and added: -0.0 + 0.0 is 0.0, NaN bits change
    return replace(src, device=step.device, layout=None, zero_sign=src.zero_sign or (summed and src.is_float),
                   payload=src.payload and not summed)


def _ints(shape: SymShape) -> Shape:
    """A step's shape, which analysis only sees with plain ints (`Program.instantiate`)."""
    if not all(isinstance(size, int) for size in shape):
        raise TypeError(f"analysis: shape {shape!r} holds a variable: analyze the instantiated program")
    return tuple(size for size in shape if isinstance(size, int))


def infer(step: Step, infos: list[Info | None]) -> Info | None:
    """The Info of the value `step` produces (None for Realize/Fetch)."""
    return _Inference(infos).visit(step)


class _Inference(StepVisitor[Info | None]):
    """`visit(step)`: the Info of the value a step produces, given the Infos of the steps before it."""

    def __init__(self, infos: list[Info | None]) -> None:
        self.infos = infos

    def src(self, index: int) -> Info:
        info = self.infos[index]
        assert info is not None, f"step refers to {index}, which holds no value"
        return info

    def visit_leaf(self, step: Leaf) -> Info:
        return Info(step.data.shape, step.data.dtype, device=step.device)

    def visit_load_const(self, step: LoadConst) -> Info:
        return Info(_ints(step.shape), step.dtype, device=step.device, const="const")

    def visit_load_empty(self, step: LoadEmpty) -> Info:
        return Info(_ints(step.shape), step.dtype, device=step.device, defined=False)

    def visit_custom(self, step: Custom) -> Info:
        return Info(_ints(step.shape), step.dtype, device=step.device, payload=False)

    def visit_const_like(self, step: ConstLike) -> Info:
        base = self.src(step.src)
        shape = base.shape if step.shape is None else _ints(step.shape)
        return Info(shape, base.dtype, device=base.device, layout=base.layout, const="const")

    def visit_elementwise(self, step: Elementwise) -> Info:
        return _elementwise(step, [self.src(i) for i in step.srcs])

    def visit_reduce(self, step: Reduce) -> Info:
        return _reduce(step, self.src(step.src))

    def visit_movement(self, step: Movement) -> Info:
        return _movement(step, self.src(step.src))

    def visit_gather(self, step: Gather) -> Info:
        x, idx = self.src(step.src), self.src(step.indices)
        if x.multi or idx.multi:
            raise ValueError("gather: multi-device values are not gathered (LazyBuffer.gather only)")
        shape = (*x.shape[:step.axis], *idx.shape, *x.shape[step.axis + 1:])
        return replace(x, shape=shape, const="", consecutive=True)

    def visit_cast(self, step: Cast) -> Info:
        return _cast(step, self.src(step.src))

    def visit_contiguous(self, step: Contiguous) -> Info:
        return replace(self.src(step.src), const="")

    def visit_copy(self, step: Copy) -> Info:
        return _copy(step, self.src(step.src))

    def visit_shard(self, step: Shard) -> Info:
        base = self.src(step.src)
        return replace(base, device="", layout=lay.shard(base.shape, step.devices, step.axis))

    def visit_assign(self, step: Assign) -> Info:
        value = self.src(step.value)
        return replace(self.src(step.target), approx=value.approx, aux=value.aux, zero_sign=value.zero_sign,
                       payload=value.payload, const="", defined=True)

    def visit_realize(self, step: Realize) -> None:
        return None

    def visit_fetch(self, step: Fetch) -> None:
        return None


def analyze(program: Program, run: int = 0) -> list[Info | None]:
    """Infos of every step (a symbolic program's at binding `run`); the last step of a program that
    expects an error gets None."""
    program = program.instantiate(run)
    infos: list[Info | None] = []
    for index, step in enumerate(program.steps):
        if program.expect is not None and index == len(program.steps) - 1:
            infos.append(None)
        else:
            infos.append(infer(step, infos))
    return infos
