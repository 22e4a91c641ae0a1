"""What a run exercised: counts by op, dtype, movement op and feature, derived from the programs.

Keys are strings grouped by prefix: `op:ADD`, `dtype:float16`, `move:pad`, `feature:ring`, ...
`opt:` keys name fast's optimization paths, counted from random programs only (conformance/optpaths.py).
`REQUIRED` lists every key the CI profile must reach; `missing(counts)` names the ones it did not.
Only steps that ran on both sides count (`program_keys(program, upto)`). A symbolic program counts
once (its first binding's values), plus `feature:symbolic*` keys.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import fields

from conformance.analysis import Info, analyze
from conformance.optpaths import REQUIRED_OPT
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
    has_vars,
)
from conformance.vocab import BINARY, DTYPES, FLOATS, MOVEMENT, REDUCE, TERNARY, UNARY, int_range

RING_THRESHOLD = 256_000
SPLIT_THRESHOLD = 32768

FEATURES = (
    "shard-axis-0", "shard-axis-1", "shard-axis-2", "shard-replicated", "shard-ndev-2", "shard-ndev-3",
    "shard-ndev-4", "shard-uneven", "shard-even", "reduce-sharded-naive", "reduce-sharded-ring",
    "ring-env", "reduce-sharded-partial", "mixed-axes", "shrink-one-shard", "pad-back", "multi-copy",
    "multi-assign", "split-reduce", "assign", "assign-read-same-realize", "assign-read-earlier",
    "assign-stale-read", "copy", "copy-force", "const-fold", "masked-const", "reduce-const", "cast-const",
    "identity-fold", "empty-reduce", "zero-size", "scalar-0d", "stride-flip", "stride-k", "view-merge-blocked",
    "transcendental", "nan-data", "inf-data", "neg-zero-data", "int-edge-data", "zero-divisor",
    "custom", "empty-loadop", "invalid-ValueError", "invalid-TypeError", "invalid-RuntimeError", "bitcast",
    "big-reduce-output", "row-broadcast", "symbolic", "symbolic-shape", "symbolic-reduce",
)
REQUIRED = tuple([f"op:{o}" for o in (*UNARY, "CAST", "BITCAST", *BINARY, *TERNARY)] +
                 [f"reduce:{o}" for o in REDUCE] + [f"dtype:{d}" for d in DTYPES] +
                 [f"move:{m}" for m in MOVEMENT] + [f"feature:{f}" for f in FEATURES] + list(REQUIRED_OPT))


def _data_features(step: Leaf) -> set[str]:
    out: set[str] = set()
    if step.data.size == 0:
        return {"feature:zero-size"}
    values = step.data.values
    for v in values:
        if isinstance(v, float):
            out |= {"feature:nan-data"} if math.isnan(v) else set()
            out |= {"feature:inf-data"} if math.isinf(v) else set()
            out |= {"feature:neg-zero-data"} if v == 0 and math.copysign(1, v) < 0 else set()
            out |= {"feature:zero-divisor"} if v == 0 else set()
        elif isinstance(v, int) and not isinstance(v, bool) and step.data.dtype != "bool":
            low, high = int_range(step.data.dtype)
            out |= {"feature:int-edge-data"} if v in (low, high) else set()
            out |= {"feature:zero-divisor"} if v == 0 else set()
    return out


def _shard_features(info: Info) -> set[str]:
    assert info.layout is not None
    lay = info.layout
    out = {f"feature:shard-ndev-{len(lay.devices)}"}
    if lay.axis is None:
        return out | {"feature:shard-replicated"}
    out.add(f"feature:shard-axis-{lay.axis}")
    out.add("feature:shard-uneven" if lay.uneven else "feature:shard-even")
    return out


def _reduce_features(step: Reduce, src: Info, program: Program) -> set[str]:
    out = {f"reduce:{step.op}"}
    per_output = math.prod(src.shape[a] for a in step.axes)
    if per_output == 0:
        out.add("feature:empty-reduce")
    if per_output >= SPLIT_THRESHOLD:
        out.add("feature:split-reduce")
    if src.const == "const":
        out.add("feature:reduce-const")
    lay = src.layout
    if lay is not None and lay.axis is not None and lay.axis in step.axes:
        outputs = math.prod(s for i, s in enumerate(src.shape) if i not in step.axes)
        if not lay.all_real:
            out.add("feature:reduce-sharded-partial")
        elif program.ring is not None and program.ring >= 2:
            out |= {"feature:reduce-sharded-ring", "feature:ring-env"}
        elif len(lay.devices) > 2 and outputs > RING_THRESHOLD:
            out |= {"feature:reduce-sharded-ring", "feature:big-reduce-output"}
        else:
            out.add("feature:reduce-sharded-naive")
    return out


def _movement_features(step: Movement, src: Info, program: Program, infos: list[Info | None]) -> set[str]:
    out = {f"move:{step.kind}"}
    if step.kind == "stride":
        out |= {"feature:stride-flip"} if any(k < 0 for k in step.arg) else set()
        out |= {"feature:stride-k"} if any(abs(k) > 1 for k in step.arg) else set()
    if step.kind == "expand" and isinstance(program.steps[step.src], Reduce):
        out.add("feature:row-broadcast")  # a reduced row read back along the row (a row kernel in fast)
    if step.kind == "reshape":
        before = program.steps[step.src]
        if isinstance(before, Movement) and before.kind in ("permute", "pad", "stride", "shrink"):
            out.add("feature:view-merge-blocked")
    lay = src.layout
    if lay is not None and lay.axis is not None:
        if step.kind == "shrink" and step.arg[lay.axis] != (0, src.shape[lay.axis]):
            out.add("feature:shrink-one-shard")
        if step.kind == "pad" and step.arg[lay.axis] != (0, 0):
            out.add("feature:pad-back")
    return out


def step_keys(step: Step, index: int, program: Program, infos: list[Info | None]) -> set[str]:
    """Coverage keys of one step that ran."""
    info = infos[index]
    out: set[str] = {f"dtype:{info.dtype}"} if info is not None else set()
    if info is not None and info.shape == () and not isinstance(step, (Realize, Fetch)):
        out.add("feature:scalar-0d")
    return out | _StepKeys(index, program, infos, [infos[i] for i in step.refs()]).visit(step)


class _StepKeys(StepVisitor[set[str]]):
    """`visit(step)`: the keys of the step's own kind (what its operands' Infos `srcs` show); a step
    whose operand has no Info (an invalid program's) adds none."""

    def __init__(self, index: int, program: Program, infos: list[Info | None], srcs: list[Info | None]) -> None:
        self.info, self.program, self.infos, self.srcs = infos[index], program, infos, srcs

    def visit_other(self, step: Step) -> set[str]:
        return set()  # Realize, Fetch

    def visit_leaf(self, step: Leaf) -> set[str]:
        return _data_features(step)

    def visit_load_const(self, step: LoadConst) -> set[str]:
        return {"op:CONST"}

    def visit_const_like(self, step: ConstLike) -> set[str]:
        return {"op:CONST"}

    def visit_load_empty(self, step: LoadEmpty) -> set[str]:
        return {"feature:empty-loadop"}

    def visit_custom(self, step: Custom) -> set[str]:
        return {"feature:custom"}

    def visit_elementwise(self, step: Elementwise) -> set[str]:
        return _elementwise_features(step, self.srcs, self.program)

    def visit_gather(self, step: Gather) -> set[str]:
        return {"op:GATHER"}

    def visit_reduce(self, step: Reduce) -> set[str]:
        source = self.srcs[0]
        return set() if source is None else _reduce_features(step, source, self.program)

    def visit_movement(self, step: Movement) -> set[str]:
        source = self.srcs[0]
        return set() if source is None else _movement_features(step, source, self.program, self.infos)

    def visit_cast(self, step: Cast) -> set[str]:
        source = self.srcs[0]
        if source is None:
            return set()
        out = {"op:BITCAST" if step.bitcast else "op:CAST"}
        out |= {"feature:bitcast"} if step.bitcast else set()
        out |= {"feature:disk-bitcast"} if step.bitcast and source.disk else set()
        out |= {"feature:cast-const"} if source.const == "const" else set()
        return out

    def visit_copy(self, step: Copy) -> set[str]:
        source, info = self.srcs[0], self.info
        if source is None:
            return set()
        out = {"feature:multi-copy" if source.multi else "feature:copy"}
        out |= {"feature:disk-copy"} if info is not None and (info.disk or source.disk) else set()
        out |= {"feature:copy-force"} if step.force else set()
        return out

    def visit_shard(self, step: Shard) -> set[str]:
        return set() if self.info is None else _shard_features(self.info)

    def visit_assign(self, step: Assign) -> set[str]:
        source = self.srcs[0]
        return set() if source is None else {"feature:assign"} | ({"feature:multi-assign"} if source.multi else set())

    def visit_contiguous(self, step: Contiguous) -> set[str]:
        return {"op:CONTIGUOUS"}


def _elementwise_features(step: Elementwise, srcs: list[Info | None], program: Program) -> set[str]:
    out = {f"op:{step.op}"}
    if step.op in ("EXP2", "LOG2", "SIN"):
        out.add("feature:transcendental")
    if all(s is not None and s.const == "const" for s in srcs):
        out.add("feature:const-fold")
    if any(s is not None and s.const == "masked" for s in srcs):
        out.add("feature:masked-const")
    consts = [program.steps[i] for i in step.srcs if isinstance(program.steps[i], ConstLike)]
    if consts and len(consts) < len(step.srcs) and any(c.value in (0, 1, -1) for c in consts):  # type: ignore[attr-defined]
        out.add("feature:identity-fold")
    layouts = {s.layout.axis for s in srcs if s is not None and s.layout is not None}
    if len(layouts) > 1:
        out.add("feature:mixed-axes")
    if step.op == "DIV" and any(s is not None and s.dtype in FLOATS for s in srcs):
        out.add("feature:float-div")
    return out


def _assign_reads(program: Program, upto: int) -> set[str]:
    """Reads of assign targets: realized with the assign, earlier, or stale (the RuntimeError case)."""
    out: set[str] = set()
    targets = {s.target: i for i, s in enumerate(program.steps[:upto]) if isinstance(s, Assign)}
    realized_at: dict[int, int] = {}
    for index, step in enumerate(program.steps[:upto]):
        if isinstance(step, Realize):
            for item in step.items:
                realized_at.setdefault(item, index)
    for index, step in enumerate(program.steps[:upto]):
        if not isinstance(step, Elementwise) or not set(step.srcs) & set(targets):
            continue
        assign = targets[next(iter(set(step.srcs) & set(targets)))]
        mine, theirs = realized_at.get(index), realized_at.get(assign)
        if mine is not None and theirs is not None:
            out.add("feature:assign-read-same-realize" if mine == theirs else
                    "feature:assign-read-earlier" if mine < theirs else "feature:assign-stale-read")
    return out


def _symbolic_keys(program: Program, upto: int) -> set[str]:
    """`symbolic` for a program with variables; `symbolic-shape` when a step's shape or argument holds
    one; `symbolic-reduce` when a reduced axis has another size in the last binding than in the first."""
    if not program.variables:
        return set()
    out = {"feature:symbolic"}
    first, last = analyze(program, 0), analyze(program, program.runs - 1)
    for step in program.steps[:upto]:
        if any(has_vars(getattr(step, f.name)) for f in fields(step)):  # type: ignore[arg-type]
            out.add("feature:symbolic-shape")
        if isinstance(step, Reduce) and (a := first[step.src]) is not None and (b := last[step.src]) is not None \
                and any(a.shape[axis] != b.shape[axis] for axis in step.axes):
            out.add("feature:symbolic-reduce")
    return out


def program_keys(program: Program, upto: int | None = None) -> Counter[str]:
    """Coverage keys of a program whose first `upto` steps ran (default: all).

    The invalid last step of a program that expects an error counts only as `invalid-<Error>`.
    """
    concrete, infos = program.instantiate(), analyze(program)
    upto = len(program.steps) if upto is None else upto
    valid = min(upto, len(program.steps) - 1) if program.expect is not None else upto
    keys: Counter[str] = Counter()
    for index, step in enumerate(concrete.steps[:valid]):
        keys.update(step_keys(step, index, concrete, infos))
    keys.update(_assign_reads(program, upto))
    keys.update(_symbolic_keys(program, valid))
    if program.expect is not None and upto == len(program.steps):
        keys[f"feature:invalid-{program.expect}"] += 1
    return keys


def missing(counts: Counter[str] | dict[str, int], optimizations: bool = True) -> list[str]:
    """The required keys `counts` lacks; without `optimizations`, the `opt:` ones are not required
    (a run that cannot observe them: under MPI, or a candidate other than fast)."""
    return [key for key in REQUIRED if not counts.get(key) and (optimizations or not key.startswith("opt:"))]


def table(counts: Counter[str] | dict[str, int], width: int = 100) -> str:
    """The coverage table: one line per group, `name count` pairs, missing required keys flagged."""
    groups: dict[str, list[str]] = {}
    for key in sorted(set(counts) | set(REQUIRED)):
        group, name = key.split(":", 1)
        groups.setdefault(group, []).append(f"{name}={counts.get(key, 0)}" + ("!" if not counts.get(key) else ""))
    lines = []
    for group in ("op", "reduce", "dtype", "move", "feature", "opt"):
        cells, line = groups.get(group, []), f"{group:>8}:"
        for cell in cells:
            if len(line) + len(cell) + 1 > width:
                lines.append(line)
                line = " " * 9
            line += " " + cell
        lines.append(line)
    lines.append("(name=count, programs that exercised it; ! marks a required item this run did not exercise; "
                 "opt: fast's optimization paths, counted from random programs only)")
    return "\n".join(lines)


def merge(counters: Iterable[Counter[str] | dict[str, int]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for c in counters:
        total.update(c)
    return total
