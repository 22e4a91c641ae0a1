"""Coverage of fast's optimization layer: which paths the kernels that ran took.

The lowering records what it decided on each lowered program (`LinearProgram.paths` and
`split_counts`, fast/codegen/paths.py). `PathObserver.install(fast)` watches the engine while a worker
replays programs, with no change to what runs: every kernel fetched for a run (`get_kernel`: direct
runs, captures, replays' first lookups) or launched by a replay (`replay_lanes.run_kernel`: kernels
kept in a template, parametrized ones), the FMA guard's choice (`runnable`: the fused
kernel ran, or the unfused one because an input was beyond the bound) and every schedule replayed
from a template. `take()` returns the `opt:` coverage keys seen since the last call. A threaded
kernel also yields how a launch on this machine divides each shared loop among its chunks
(runtime/launch.py `chunk_count`): `thread-split-even`, `thread-split-remainder` or
`thread-split-short` (fewer iterations than chunks).

`opt:captured` is added by the runner when a program run in captured mode (conformance/captured.py)
replayed its trace on the second call. Only random programs count toward `REQUIRED_OPT` (runner.py):
directed programs reach these paths by construction, so they would hide a strategy that no longer does.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: Optimization items random programs of the ci profile must reach (`--require-coverage`).
REQUIRED_OPT = tuple(f"opt:{name}" for name in (
    "vector-output", "vector-tail", "vector-reduce", "unrolled-outputs", "register-tile", "dot-tile",
    "column-chunks", "multi-reduce", "row-kernel", "gemm", "gemm-row-edge", "gemm-column-edge", "gemm-no-edge",
    "gemm-batched", "gemm-fma", "gemm-checked-tiles", "threaded", "thread-split-even", "thread-split-remainder",
    "const-params", "replayed", "captured",
))


def split_keys(program: Any, launch: ModuleType) -> set[str]:
    """How a launch divides each loop a threaded `program` shares among its chunks."""
    work = program.mem_bytes + program.flops
    threads = launch.threads_for(work)
    chunks = 1 if threads == 1 else launch.chunk_count(work, threads, program.chunks_per_thread)
    out: set[str] = set()
    for count in program.split_counts:
        out.add("opt:thread-split-short" if count < chunks else
                "opt:thread-split-even" if count % chunks == 0 else "opt:thread-split-remainder")
    return out


class PathObserver:
    """Collects `opt:` keys from a package's engine (see the module docstring)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.launch: ModuleType | None = None

    def take(self) -> set[str]:
        seen, self.seen = self.seen, set()
        return seen

    def kernel(self, program: Any) -> None:
        self.seen.update(f"opt:{name}" for name in program.paths)
        if program.threaded and self.launch is not None:
            self.seen.update(split_keys(program, self.launch))

    def install(self, fast: ModuleType) -> Callable[[], None]:
        """Wrap fast's `get_kernel`, `runnable` and `_replay` wherever the engine binds them; the
        returned callable restores them. A package without these internals is left alone."""
        try:
            realize = importlib.import_module(f"{fast.__name__}.engine.realize")
            lanes = importlib.import_module(f"{fast.__name__}.engine.replay_lanes")
            self.launch = importlib.import_module(f"{fast.__name__}.runtime.launch")
        except ImportError:
            return lambda: None
        undos = [self._wrap(fast, realize, "get_kernel", lambda args, result: self.kernel(result[0].program)),
                 self._wrap(fast, lanes, "run_kernel", lambda args, result: self.kernel(args[0].program)),
                 self._wrap(fast, realize, "runnable", self._after_runnable),
                 self._wrap(fast, realize, "_replay", self._after_replay)]

        def undo() -> None:
            for step in reversed(undos):
                step()
        return undo

    def _after_runnable(self, args: tuple[Any, ...], result: Any) -> None:
        self.seen.add("opt:fma-guard-fused" if result.program.bounded_inputs else "opt:fma-guard-unfused")

    def _after_replay(self, args: tuple[Any, ...], result: Any) -> None:
        if result:
            self.seen.add("opt:replayed")

    @staticmethod
    def _wrap(fast: ModuleType, owner: ModuleType, name: str,
              after: Callable[[tuple[Any, ...], Any], None]) -> Callable[[], None]:
        """Rebind `name` (wherever fast binds it) to a wrapper calling `after(args, result)`."""
        from conformance.mutants_fast import replace_everywhere
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            after(args, result)
            return result
        return replace_everywhere(fast, name, original, wrapper)
