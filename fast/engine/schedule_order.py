"""Ordering a schedule's steps: dependencies first, ties by position, and, when an assign makes an
order impossible, the readers of its old memory that need a snapshot (fast/engine/schedule.py).

Invariants:
- A step runs after every step producing a key it reads; an assign runs after every other step that
  reads the old contents of the memory it overwrites.
- Ordering changes no step; an impossible order is reported, never resolved here.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence

from fast.engine.schedule_types import Step
from fast.graph.node import LazyBuffer


def _dependencies(steps: Sequence[Step]) -> list[set[int]]:
    """deps[i]: steps that must run before step i: producers of what it reads, and, for an
    assign, every other step reading the old contents of the assigned memory."""
    producer = {key: index for index, step in enumerate(steps) for key in step.writes}
    deps = [{producer[key] for key in step.reads if key in producer and producer[key] != index}
            for index, step in enumerate(steps)]
    for index, step in enumerate(steps):
        if not step.item.assign:
            continue
        root = step.item.outputs[0].base
        for other, reader in enumerate(steps):
            if other != index and any(base is not step.owner and base.buffer.base is root
                                      for base in reader.read_bases):
                deps[index].add(other)
    return deps


def order_steps(steps: Sequence[Step]) -> tuple[list[Step], list[tuple[LazyBuffer, LazyBuffer]]]:
    """Steps in dependency order (ties by position), or, when the order is impossible, the
    (owner, old base) pairs of readers that would have to run both before and after an assign."""
    deps = _dependencies(steps)
    users: list[list[int]] = [[] for _ in steps]
    for index, needed in enumerate(deps):
        for other in needed:
            users[other].append(index)
    waiting = [len(needed) for needed in deps]
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[Step] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(steps[index])
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) == len(steps):
        return order, []
    return [], _conflicts(steps, deps, {index for index, count in enumerate(waiting) if count})


def _conflicts(steps: Sequence[Step], deps: list[set[int]], stuck: set[int]) -> list[tuple[LazyBuffer, LazyBuffer]]:
    """Readers of an assign's old memory that also (transitively) need the assign's result."""
    found: list[tuple[LazyBuffer, LazyBuffer]] = []
    for index in stuck:
        step = steps[index]
        if not step.item.assign:
            continue
        root = step.item.outputs[0].base
        for other in stuck:
            for base in steps[other].read_bases:
                if other != index and base is not step.owner and base.buffer.base is root \
                        and (steps[other].owner, base) not in found:
                    found.append((steps[other].owner, base))
    if not found:
        raise RuntimeError("scheduler: the schedule has a dependency cycle that no snapshot resolves")
    return found
