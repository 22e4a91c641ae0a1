"""Runtimes: allocators, cached compilers, program loaders, bundled per device as `Compiled`.
Device modules (`fast.runtime.clang`, ...) expose `create(device_name) -> Compiled`."""
from fast.runtime.base import COMPILE_COUNTER, Allocator, Compiled, Compiler, Program

__all__ = ["COMPILE_COUNTER", "Allocator", "Compiled", "Compiler", "Program"]
