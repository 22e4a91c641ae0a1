"""Build a schedule's missing kernel libraries on other threads before it runs, overlapping the
lowering of the kernels after them (the first call of a process with a cold compile cache).

A compiler that may build on other threads (`Compiler.parallel_builds`: CLANG's C compiler, one
process per source; LLVM's llvmlite, whose C calls release the GIL) builds while the caller's
thread lowers and renders. Before a schedule runs, `prebuild` walks its kernel items in order and
asks `pending` for the (compiler, source) of each kernel that is not compiled in this process yet
(`pending` lowers and renders on the caller's thread, in schedule order, or reads the program
store). A source that is not in the disk cache yet (`Compiler.is_cached`) is handed to a pool of
up to `workers` threads at once, so compiling kernel k runs while kernel k+1 is lowered; each
source is built once. `prebuild` returns when every build has ended; the items then run as before
and find their libraries on disk. llvmlite runs one LLVM call at a time (its own lock), so LLVM
builds do not overlap each other, only the caller's Python work.

Nothing here changes which kernel an item runs or any value: a failed build is left to the item,
which builds it again and raises in schedule order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fast.ops import KernelOps

Pending = Callable[[Any], "tuple[Any, str] | None"]  # item -> (compiler, source) to build, or None


def _needs_build(compiler: Any, source: str) -> bool:
    """Whether building `source` would compile (compilers without `is_cached` always would)."""
    is_cached = getattr(compiler, "is_cached", None)
    return is_cached is None or not is_cached(source)


def prebuild(items: Sequence[Any], pending: Pending, workers: int) -> int:
    """Build the libraries `pending` names for `items` on up to `workers` threads, each as soon as
    it is known; returns how many builds were started (0 with fewer than two workers)."""
    if workers < 2:
        return 0
    builds: dict[str, Future[Any]] = {}
    seen: set[str] = set()  # sources asked about (each is looked up in the disk cache once)
    pool: ThreadPoolExecutor | None = None
    try:
        for item in items:
            if item.ast.op is not KernelOps.SINK:
                continue
            try:
                found = pending(item)
            except Exception:  # raised again, in schedule order, by the item itself
                continue
            if found is None or found[1] in seen:
                continue
            seen.add(found[1])
            if not _needs_build(*found):
                continue
            if pool is None:
                pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fast-build")
            builds[found[1]] = pool.submit(found[0].compile_cached, found[1])
    finally:
        if pool is not None:
            pool.shutdown(wait=True)  # a failed build's error stays in its future: the item raises it
    return len(builds)
