"""The LLVM runtime: LLVM IR from `LLVMIRRenderer`, optimised and compiled to an object file with
llvmlite, loaded into an MCJIT execution engine, called with ctypes like CLANG kernels.

- memory: host memory from `HostAllocator` (runtime/base.py), exactly as CLANG, so copies between
  CLANG and LLVM are plain host copies and programs of both take the same handles.
- compiler: `llvm.parse_assembly` + `verify`, the new pass manager's default O2 pipeline
  (`LLVM_OPT_LEVEL`), then `TargetMachine.emit_object` for the host triple, CPU and features. No
  fast-math flags exist in the IR, and LLVM's default FP-op fusion mode only fuses the `fmuladd`
  intrinsic (never emitted), so `a*b+c` stays two roundings.
- library format: `LIBRARY_MAGIC`, a 16-character digest of the source, then the object file. The
  compiler renames the kernel `<name>__<digest>` because kernel names repeat across programs.
- two at once: each compile parses its module into an LLVM context of its own, so compiles may run
  on other threads (`parallel_builds`, engine/prebuild.py) while the caller lowers the next kernels.
  llvmlite runs one C call at a time per process (its own lock; the GIL is released inside), so a
  compile that finds this process's LLVM busy goes to a helper process (runtime/llvm_build.py: the
  same `compile_ir`, the same machine settings, the same bytes), started on first such use. The
  identity is computed once per process (it asks LLVM, which would wait for that lock).
- caching: the library bytes are what `Compiler.compile_cached` stores on disk (`<cache_dir>/llvm/`),
  keyed by sha256(identity, source); the identity names llvmlite, the LLVM version, triple, host CPU
  and features, the optimisation level, relocation/code model and library format, so a cached object
  is only reused on the kind of machine it was built for. `COMPILE_COUNTER` counts as for CLANG.
- loading: every object goes into one process-wide MCJIT engine (`add_object_file`, then
  `finalize_object`), once per digest, and stays loaded for the life of the process (about 8 KB
  each). External symbols (`exp2f`, `sinf`, ... from the `llvm.*` intrinsics) resolve against the
  process, where libm is loaded (`load_library_permanently` makes sure of it).
- `LLVMProgram(*handles, vals=(), wait=False)`: buffers as `void*`, variables as `int64_t`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
import time
from collections.abc import Sequence
from typing import Any

from fast.renderer.llvmir import LLVMIRRenderer
from fast.runtime import cpu, llvm_build
from fast.runtime.base import Compiled, Compiler
from fast.runtime.host import HostAllocator, HostMemory
from fast.runtime.host import addresses as host_addresses
from fast.runtime.workers import NativeCall

try:
    import llvmlite
    import llvmlite.binding as llvm
except ImportError as error:  # pragma: no cover - exercised only where llvmlite is missing
    llvm = None
    _IMPORT_ERROR: ImportError | None = error
else:
    _IMPORT_ERROR = None

LLVM_OPT_LEVEL = llvm_build.OPT_LEVEL
RELOC, CODE_MODEL = llvm_build.RELOC, llvm_build.CODE_MODEL
LIBRARY_MAGIC = llvm_build.LIBRARY_MAGIC
_DIGEST_CHARS = llvm_build.DIGEST_CHARS
_HERE = threading.Lock()  # held while this process compiles; a compile that finds it held uses the helper


def _require_llvmlite() -> Any:
    if llvm is None:
        raise RuntimeError(f"LLVM device needs the llvmlite package, which cannot be imported: {_IMPORT_ERROR}")
    return llvm


@functools.lru_cache(maxsize=1)
def _initialise() -> None:
    """Targets, asm printer and libm, once per process."""
    binding = _require_llvmlite()
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm is not None:
        binding.load_library_permanently(libm)


@functools.lru_cache(maxsize=1)
def machine_settings() -> llvm_build.MachineSettings:
    """The host's target machine settings (triple, CPU, features, optimisation, relocation, code model)."""
    _initialise()
    return llvm_build.MachineSettings(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                                      llvm.get_host_cpu_features().flatten())


def _target_machine() -> Any:
    """A fresh host TargetMachine (an MCJIT engine takes ownership of the one it is given)."""
    return machine_settings().machine()


@functools.lru_cache(maxsize=1)
def _compile_machine() -> Any:
    return _target_machine()


@functools.lru_cache(maxsize=1)
def _identity() -> str:
    """Everything besides the source that decides a library (module docstring), once per process."""
    binding, settings = _require_llvmlite(), machine_settings()
    version = ".".join(str(part) for part in binding.llvm_version_info)
    return (f"llvmlite {llvmlite.__version__}\nLLVM {version}\n{settings.triple}\n{settings.cpu}\n{settings.features}\n"
            f"O{LLVM_OPT_LEVEL} reloc={RELOC} codemodel={CODE_MODEL}\n{LIBRARY_MAGIC!r}")


class LLVMCompiler(Compiler):
    """LLVM IR text -> a library: `LIBRARY_MAGIC`, a 16-character source digest, then the object file.

    Every function the module defines with external linkage (the kernel) is renamed `<name>__<digest>`,
    so objects of different kernels that share a name can live in one JIT engine."""

    cache_namespace = "llvm"
    parallel_builds = True  # see the module docstring: a context per compile, llvmlite's lock

    def identity(self) -> str:
        return _identity()

    def compile(self, src: str) -> bytes:
        """`src` compiled here, or by the helper process when this process is compiling already."""
        _require_llvmlite()
        if _HERE.acquire(blocking=False):
            try:
                return llvm_build.compile_ir(src, _compile_machine())
            finally:
                _HERE.release()
        settings = machine_settings()
        helper = llvm_build.shared_helper(settings)
        if helper is not None:
            try:
                return helper.compile(src)
            except llvm_build.HelperError:
                llvm_build.forget_helper(settings, helper)
        with _HERE:
            return llvm_build.compile_ir(src, _compile_machine())


class _Engine:
    """The process's one MCJIT engine; each distinct library's object is added once."""

    def __init__(self) -> None:
        _initialise()
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine())
        self.loaded: set[str] = set()
        self.lock = threading.Lock()

    def address(self, name: str, lib: bytes) -> int:
        """The address of kernel `name` from `lib` (loaded on first use); 0 when it has no such kernel."""
        header = len(LIBRARY_MAGIC) + _DIGEST_CHARS
        if not lib.startswith(LIBRARY_MAGIC) or len(lib) < header:
            raise RuntimeError("LLVM: the library was not produced by LLVMCompiler")
        digest = lib[len(LIBRARY_MAGIC):header].decode()
        with self.lock:
            if digest not in self.loaded:
                self.engine.add_object_file(llvm.ObjectFileRef.from_data(lib[header:]))
                self.engine.finalize_object()
                self.loaded.add(digest)
            return int(self.engine.get_function_address(f"{name}__{digest}"))


@functools.lru_cache(maxsize=1)
def jit_engine() -> _Engine:
    _require_llvmlite()
    return _Engine()


@functools.lru_cache(maxsize=64)
def _function_type(buffers: int, variables: int) -> Any:
    return ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * buffers + [ctypes.c_int64] * variables))


class LLVMProgram:
    """One kernel function: `program(*handles, vals=(), wait=False) -> seconds | None`."""

    def __init__(self, name: str, lib: bytes, launch_dims: Any = None) -> None:
        """`launch_dims` is None for CPU kernels (Compiled.runtime's contract); it is ignored."""
        self.name = name
        self.address = jit_engine().address(name, lib)
        if self.address == 0:
            raise RuntimeError(f"LLVM: the object has no kernel named {name!r}")
        self.functions: dict[tuple[int, int], Any] = {}

    def native_call(self, handles: Sequence[HostMemory], vals: Sequence[int]) -> NativeCall:
        """This kernel's call on `handles` with `vals` as a function address and int64 words (for a
        worker's native loop: runtime/workers.py)."""
        return NativeCall(self.address, (*host_addresses(self.name, "LLVM (host)", handles), *map(int, vals)))

    def __call__(self, *handles: HostMemory, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        arguments = host_addresses(self.name, "LLVM (host)", handles)
        if vals:
            arguments += [int(value) for value in vals]
        arity = (len(handles), len(vals))
        function = self.functions.get(arity)
        if function is None:
            function = self.functions[arity] = _function_type(*arity)(self.address)
        if not wait:
            function(*arguments)
            return None
        start = time.perf_counter()
        function(*arguments)
        return time.perf_counter() - start


_ALLOCATOR = HostAllocator()
_RENDERER = LLVMIRRenderer(cpu.renderer_options())
_COMPILER = LLVMCompiler()


def create(device_name: str) -> Compiled:
    """The `Compiled` for `LLVM` or `LLVM:N`; every such device shares the same parts."""
    kind, _, number = device_name.partition(":")
    if kind != "LLVM" or (number and not number.isdigit()):
        raise ValueError(f"llvm.create: {device_name!r} is not an LLVM device name")
    _require_llvmlite()
    return Compiled(device_name, _ALLOCATOR, _RENDERER, _COMPILER, LLVMProgram)
