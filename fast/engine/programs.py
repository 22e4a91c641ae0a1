"""The per-process program cache: a bounded mapping from kernel keys to compiled kernels, least
recently used first out.

Its size is `config.get().program_cache_size` (PROGRAM_CACHE_SIZE), read at each insertion (values
below 1 count as 1). Eviction drops the cache's references to the entry: the lowered program, its
source and its runner object. What the runtimes hold on their own cannot be freed: a CLANG kernel's
shared object stays loaded (ctypes cannot unload it safely; `runtime/clang.py` keeps one CDLL per
library for the life of the process) and an LLVM kernel's object code stays in the process's MCJIT
engine. Those few KB per distinct kernel are what bounds memory in practice: kernels that differ
only in scalar constants share one parametrized kernel (realize.py, codegen/const_args.py), so a
program that keeps changing constants compiles and loads at most two kernels per structure.

It is an `OrderedDict`, so code that saves and restores the cache (`dict(cache)`, `clear`,
`update`) keeps working; `get` counts as a use (plain item reads do not, so copying the cache
leaves its order alone). It takes no lock itself: its user
(`realize.get_kernel`) holds one around every lookup and insertion.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

from fast import config

K = TypeVar("K")
V = TypeVar("V")


class ProgramCache(OrderedDict[K, V]):
    """An LRU mapping bounded by `config.get().program_cache_size`."""

    def get(self, key: K, default: V | None = None) -> V | None:  # type: ignore[override]
        """The value for `key` (now the most recently used), or `default`."""
        if key not in self:
            return default
        self.move_to_end(key)
        return super().__getitem__(key)

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        self.evict(max(1, config.get().program_cache_size))

    def evict(self, size: int) -> None:
        """Drop the least recently used entries until at most `size` are left."""
        while len(self) > size:
            self.popitem(last=False)
