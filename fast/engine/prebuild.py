"""Build a schedule's missing kernel libraries in parallel before running it (the first call of a
process with a cold compile cache).

A compiler that runs as a separate process per source (`Compiler.parallel_builds`: the C compiler
of CLANG) can build several libraries at once. Before a schedule runs, `prebuild` asks `pending`
for the (compiler, source) of every kernel that is not compiled in this process yet, then builds
those libraries on up to `workers` threads into the compile cache (each `compile_cached` call
waits on its own subprocess, without the GIL). The items then run as before and find their
libraries on disk. Lowering and rendering stay on the caller's thread, in schedule order. Nothing
here changes which kernel an item runs or any value: a failed build is left to the item, which
builds it again and raises in schedule order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fast.ops import KernelOps

Pending = Callable[[Any], "tuple[Any, str] | None"]  # item -> (compiler, source) to build, or None


def prebuild(items: Sequence[Any], pending: Pending, workers: int) -> int:
    """Build the libraries `pending` names for `items` on up to `workers` threads; returns how many
    were built (0 when fewer than two are missing or there is one worker)."""
    if workers < 2:
        return 0
    builds: dict[str, Any] = {}
    for item in items:
        if item.ast.op is not KernelOps.SINK:
            continue
        try:
            found = pending(item)
        except Exception:  # raised again, in schedule order, by the item itself
            continue
        if found is not None:
            builds.setdefault(found[1], found[0])
    if len(builds) < 2:
        return 0
    with ThreadPoolExecutor(max_workers=min(workers, len(builds)), thread_name_prefix="fast-build") as pool:
        for future in [pool.submit(compiler.compile_cached, source) for source, compiler in builds.items()]:
            try:
                future.result()
            except Exception:  # the item builds it again and raises in schedule order
                continue
    return len(builds)
