"""A `fast` view (a ShapeTracker) rewritten as public movement ops, so `reference` can build it.

`view_moves(source_shape, views)` returns movement ops `(method, argument)` that, applied in order to a
buffer of `source_shape`, give exactly the buffer that `fast` reads through `views` (ShapeTracker
semantics: `views[0]` indexes the source's row-major elements, each later view indexes the elements
of the previous view's shape; a position outside a view's mask reads 0).

One view (shape, strides, offset, mask) becomes: flatten; keep the window of elements the valid
region reads; build the region's axes largest stride first, each as rows of the remaining window
(reshape when rows do not overlap; when they do, repeat the window with expand and read it back with
a longer row); put the axes back in order; expand the stride-0 axes; flip the negative ones; pad back
the mask. Sizes, strides and offsets must be plain ints (symbolic views are a ValueError).
Runs of reshapes are then merged into their last one, and a reshape to the shape it is given is
dropped (a reshape only renames row-major positions): a weight read as (1, 16, 384, 384) is one
reshape and one expand, not five records.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Move = tuple[str, Any]


def _ints(values: Sequence[Any], what: str) -> tuple[int, ...]:
    if not all(isinstance(value, int) for value in values):
        raise ValueError(f"fast.debug: a view with symbolic {what} {tuple(values)} cannot be replayed")
    return tuple(values)


def view_moves(source_shape: Sequence[Any], views: Sequence[Any]) -> list[Move]:
    """The movement ops for a stack of views over a source of `source_shape` (see module docstring)."""
    moves: list[Move] = []
    shape = _ints(source_shape, "shape")
    for view in views:
        size = math.prod(shape)
        if shape != (size,):
            moves.append(("reshape", (size,)))
        mask = None if view.mask is None else tuple((start, end) for start, end in
                                                    (_ints(pair, "mask") for pair in view.mask))
        moves += strided_moves(size, _ints(view.shape, "shape"), _ints(view.strides, "strides"),
                               _ints((view.offset,), "offset")[0], mask)
        shape = _ints(view.shape, "shape")
    return simplify(_ints(source_shape, "shape"), moves)


def _after(shape: tuple[int, ...], move: Move) -> tuple[int, ...]:
    """The shape a movement op gives."""
    method, argument = move
    if method in ("reshape", "expand"):
        return tuple(argument)
    if method == "permute":
        return tuple(shape[axis] for axis in argument)
    if method == "shrink":
        return tuple(end - start for start, end in argument)
    if method == "pad":
        return tuple(dim + before + after for dim, (before, after) in zip(shape, argument, strict=True))
    return shape  # stride: flips only


def simplify(shape: tuple[int, ...], moves: list[Move]) -> list[Move]:
    """`moves` with each run of reshapes merged into its last one and reshapes to the current shape
    dropped (the same positions, fewer records)."""
    kept: list[tuple[Move, tuple[int, ...]]] = []  # (move, the shape before it)
    for move in moves:
        before = shape
        if move[0] == "reshape" and kept and kept[-1][0][0] == "reshape":
            before = kept.pop()[1]
        shape = _after(shape, move)
        if not (move[0] == "reshape" and shape == before):
            kept.append((move, before))
    return [move for move, _ in kept]


def strided_moves(size: int, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                  mask: tuple[tuple[int, int], ...] | None) -> list[Move]:
    """Movement ops from a flat buffer of `size` elements to the view (shape, strides, offset, mask)."""
    region = mask if mask is not None else tuple((0, dim) for dim in shape)
    sizes = tuple(end - start for start, end in region)
    pads = tuple((start, dim - end) for (start, end), dim in zip(region, shape, strict=True))
    if 0 in sizes:  # nothing valid: no element is read
        return [("shrink", ((0, 0),)), ("reshape", sizes), ("pad", pads)]
    flips = tuple(stride < 0 and count > 1 for stride, count in zip(strides, sizes, strict=True))
    steps = tuple(abs(stride) if count > 1 else 0 for stride, count in zip(strides, sizes, strict=True))
    start = offset + sum(first * stride for (first, _), stride in zip(region, strides, strict=True))
    start += sum((count - 1) * stride for count, stride, flip in zip(sizes, strides, flips, strict=True) if flip)
    live = sorted((axis for axis, step in enumerate(steps) if step), key=lambda axis: -steps[axis])
    extent = 1 + sum((sizes[axis] - 1) * steps[axis] for axis in live)
    if not 0 <= start <= start + extent <= size:
        raise ValueError(f"fast.debug: view reads elements [{start}, {start + extent}) of a buffer of {size}")
    moves: list[Move] = [] if (start, extent) == (0, size) else [("shrink", ((start, start + extent),))]
    moves += _rows([(sizes[axis], steps[axis]) for axis in live], extent)
    order = tuple(sorted(range(len(live)), key=lambda j: live[j]))
    if order != tuple(range(len(live))):
        moves.append(("permute", order))
    moves.append(("reshape", tuple(sizes[axis] if steps[axis] else 1 for axis in range(len(shape)))))
    if any(count > 1 and not step for count, step in zip(sizes, steps, strict=True)):
        moves.append(("expand", sizes))
    if any(flips):
        moves.append(("stride", tuple(-1 if flip else 1 for flip in flips)))
    if mask is not None:
        moves.append(("pad", pads))
    return moves


def _rows(axes: list[tuple[int, int]], span: int) -> list[Move]:
    """From a window of `span` elements, axes (count, step) in turn: rows starting every `step`
    elements, each long enough for the axes after it. Ends with the shape of the axes' counts."""
    moves: list[Move] = []
    lead: list[int] = []
    for count, step in axes:
        need = span - (count - 1) * step
        whole = tuple((0, dim) for dim in lead)
        zeros = tuple((0, 0) for _ in lead)
        if step >= need:  # rows do not overlap: pad to count*step, cut into rows, keep the first `need`
            if count * step > span:
                moves.append(("pad", (*zeros, (0, count * step - span))))
            moves.append(("reshape", (*lead, count, step)))
        else:  # overlapping rows: `count` copies of the window, read back with rows of span + step
            moves += [("reshape", (*lead, 1, span)), ("expand", (*lead, count, span)),
                      ("reshape", (*lead, count * span)), ("pad", (*zeros, (0, count * step))),
                      ("reshape", (*lead, count, span + step))]
        if need < (step if step >= need else span + step):
            moves.append(("shrink", (*whole, (0, count), (0, need))))
        lead.append(count)
        span = need
    moves.append(("reshape", tuple(lead)))
    return moves
