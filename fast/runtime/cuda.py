"""The CUDA runtime: CUDA C from `CUDARenderer`, compiled by NVRTC (runtime/nvrtc.py), loaded and
launched through the driver API (runtime/cuda_driver.py). `CUDA` is device ordinal 0, `CUDA:N`
ordinal N.

- Creating a device needs no driver, so graphs on CUDA can be built and compiled ahead of time
  (`fast.compile`) on a machine without a GPU. The NVRTC target is then `config.get().cuda_arch`
  (env `CUDA_ARCH`, default sm_90). With a driver it is the device's own compute capability
  (`sm_<major><minor>`) and CUDA_ARCH does not override it: a cubin for another arch would not load.
- Without a driver, allocating, copying and loading a program raise
  `cuda_driver.NoCudaDriverError` ("CUDA: no CUDA driver found ..."), so `fast.realize` of a CUDA
  graph raises it.
- Memory (`CudaAllocator`, contract in runtime/base.py): handles are `CudaMemory` (ordinal, device
  pointer, nbytes). A 0-byte allocation allocates nothing and has pointer 0. `offset` views share
  the parent's memory (pointer + offset) and are never freed themselves; `free` releases a base
  once (again is a no-op) and any later use of it or its views is a ValueError. Unzeroed memory is
  filled with 0xFF bytes under `ALLOC_POISON` (as runtime/host.py does). Copies are synchronous.
- Programs (`CudaProgram`): the module is loaded (`cuModuleLoadData` of the cubin, or of the
  NUL-terminated PTX) when the program is made and unloaded when it is collected. A call launches
  one grid with `launch_dims` = ((grid x, y, z), (block x, y, z)), parameters: each buffer's device
  pointer (64 bits) in order, then each value as int64; it then waits for the kernel (results are
  ready when the call returns, as on the CPU devices) and returns the kernel's seconds measured
  with events when `wait` is true.
"""
from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from fast import config
from fast.runtime import cuda_driver as cu
from fast.runtime.base import Allocator, Compiled
from fast.runtime.nvrtc import NVRTCCompiler, nvrtc_available, nvrtc_version


class CudaMemory:
    """`nbytes` of device memory at `pointer` on device `ordinal`; `root` is the base allocation a
    view (`offset`) lies in (None for a base), `live` is False once the base was freed."""

    __slots__ = ("ordinal", "pointer", "nbytes", "root", "live")

    def __init__(self, ordinal: int, pointer: int, nbytes: int, root: CudaMemory | None = None) -> None:
        self.ordinal, self.pointer, self.nbytes, self.root, self.live = ordinal, pointer, nbytes, root, True

    def __repr__(self) -> str:
        kind = "view" if self.root is not None else "base"
        return f"CudaMemory({kind}, device={self.ordinal}, pointer={self.pointer:#x}, nbytes={self.nbytes})"

    @property
    def address(self) -> int:
        """The device pointer; ValueError once the memory was freed."""
        if not (self.root or self).live:
            raise ValueError(f"CUDA: {self!r} used after free")
        return self.pointer


def _host_address(view: memoryview, writable: bool) -> tuple[np.ndarray, int]:
    """A uint8 array over `view` (keep it alive while the address is used) and its address."""
    array = np.frombuffer(view, dtype=np.uint8)
    if writable and not array.flags.writeable:
        raise ValueError("copyout: the destination memory is read-only")
    return array, array.ctypes.data


class CudaAllocator(Allocator):
    """Device memory of device `ordinal` (cuMemAlloc); see the module docstring."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal

    def _own(self, handle: Any, operation: str) -> CudaMemory:
        if not isinstance(handle, CudaMemory) or handle.ordinal != self.ordinal:
            raise TypeError(f"{operation}: expected memory of CUDA device {self.ordinal}, got {handle!r}")
        return handle

    def alloc(self, nbytes: int, zeroed: bool = True) -> CudaMemory:
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
            raise ValueError(f"alloc: nbytes must be a non-negative int, got {nbytes!r}")
        cu.driver()  # no driver: NoCudaDriverError, even for 0 bytes
        if nbytes == 0:
            return CudaMemory(self.ordinal, 0, 0)
        pointer = cu.mem_alloc(self.ordinal, nbytes)
        if zeroed or config.get().alloc_poison:
            try:
                cu.memset_d8(self.ordinal, pointer, 0 if zeroed else 0xFF, nbytes)
            except RuntimeError:
                cu.mem_free(self.ordinal, pointer)
                raise
        return CudaMemory(self.ordinal, pointer, nbytes)

    def free(self, handle: CudaMemory, nbytes: int | None = None) -> None:
        """Release a base allocation (a view, or a base freed before, is left alone)."""
        memory = self._own(handle, "free")
        if memory.root is not None or not memory.live:
            return
        memory.live = False
        if memory.pointer:
            cu.mem_free(self.ordinal, memory.pointer)

    def copyin(self, handle: CudaMemory, src: memoryview) -> None:
        """Host bytes -> device memory (sizes must match)."""
        memory, source = self._own(handle, "copyin"), memoryview(src).cast("B")
        if source.nbytes != memory.nbytes:
            raise ValueError(f"copyin: source has {source.nbytes} bytes, buffer has {memory.nbytes}")
        address = memory.address
        if source.nbytes:
            keep, host = _host_address(source, writable=False)
            cu.memcpy_htod(self.ordinal, address, host, source.nbytes)
            del keep

    def copyout(self, dest: memoryview, handle: CudaMemory) -> None:
        """Device memory -> host bytes (sizes must match)."""
        memory, target = self._own(handle, "copyout"), memoryview(dest).cast("B")
        if target.nbytes != memory.nbytes:
            raise ValueError(f"copyout: destination has {target.nbytes} bytes, buffer has {memory.nbytes}")
        address = memory.address
        if target.nbytes:
            keep, host = _host_address(target, writable=True)
            cu.memcpy_dtoh(self.ordinal, host, address, target.nbytes)
            del keep

    def transfer(self, dest: CudaMemory, src: CudaMemory) -> None:
        """Device-to-device copy within this device (sizes must match)."""
        target, source = self._own(dest, "transfer"), self._own(src, "transfer")
        if target.nbytes != source.nbytes:
            raise ValueError(f"transfer: destination has {target.nbytes} bytes, source has {source.nbytes}")
        if source.nbytes:
            cu.memcpy_dtod(self.ordinal, target.address, source.address, source.nbytes)

    def offset(self, handle: CudaMemory, byte_offset: int, nbytes: int) -> CudaMemory:
        """A view of bytes [byte_offset, byte_offset + nbytes) sharing `handle`'s memory."""
        memory = self._own(handle, "offset")
        address = memory.address
        if byte_offset < 0 or nbytes < 0 or byte_offset + nbytes > memory.nbytes:
            raise ValueError(f"offset: bytes [{byte_offset}, {byte_offset + nbytes}) are outside a "
                             f"{memory.nbytes}-byte buffer")
        return CudaMemory(self.ordinal, address + byte_offset, nbytes, memory.root or memory)


def _dims(name: str, launch_dims: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """`launch_dims` checked: two triples of positive ints (grid, block)."""
    try:
        grid, block = (tuple(int(size) for size in part) for part in launch_dims)
    except (TypeError, ValueError) as error:
        raise ValueError(f"CUDA: {name}: launch_dims must be ((grid x, y, z), (block x, y, z)), "
                         f"got {launch_dims!r}") from error
    if len(grid) != 3 or len(block) != 3 or min(grid + block) < 1:
        raise ValueError(f"CUDA: {name}: launch_dims must be two triples of positive sizes, got {launch_dims!r}")
    return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])


def _load_hint() -> str:
    """Why a module may not load: a driver older than the NVRTC that compiled it."""
    try:
        driver, compiler = cu.driver_version(), nvrtc_version() if nvrtc_available() else None
    except RuntimeError:
        return ""
    if compiler is None or driver >= compiler:
        return ""
    return (f" (the driver supports CUDA {driver[0]}.{driver[1]}, older than NVRTC {compiler[0]}.{compiler[1]} "
            "which compiled the kernel: install an NVRTC no newer than the driver, e.g. nvidia-cuda-nvrtc-cu12, "
            "and point NVRTC_PATH at it)")


class CudaProgram:
    """One loaded kernel: `program(*handles, vals=(), wait=False) -> seconds | None` (module docstring)."""

    def __init__(self, ordinal: int, name: str, lib: bytes, launch_dims: Any) -> None:
        self.ordinal, self.name = ordinal, name
        self.grid, self.block = _dims(name, launch_dims)
        self.module: ctypes.c_void_p | None = None
        try:
            self.module = cu.module_load(ordinal, lib)
        except cu.CudaDriverError as error:
            raise cu.CudaDriverError(f"{error} loading kernel {name!r}{_load_hint()}") from error
        try:
            self.function = cu.module_function(ordinal, self.module, name)
        except cu.CudaDriverError as error:
            raise RuntimeError(f"CUDA: the module has no kernel named {name!r}: {error}") from error

    def __del__(self) -> None:
        module, self.module = getattr(self, "module", None), None
        if module is not None and not sys.is_finalizing():
            try:
                cu.module_unload(self.ordinal, module)
            except Exception:  # a destructor must not raise (the context may be gone)
                pass

    def arguments(self, handles: Sequence[Any], vals: Sequence[int]) -> list[ctypes.c_uint64 | ctypes.c_int64]:
        """The kernel parameters: buffer pointers (TypeError naming the kernel for a non-CUDA
        buffer, ValueError for another device's), then the values as int64."""
        args: list[ctypes.c_uint64 | ctypes.c_int64] = []
        for position, handle in enumerate(handles):
            if not isinstance(handle, CudaMemory):
                raise TypeError(f"{self.name}: buffer {position} is {type(handle).__name__}, not CUDA memory")
            if handle.ordinal != self.ordinal:
                raise ValueError(f"{self.name}: buffer {position} is on CUDA device {handle.ordinal}, "
                                 f"the kernel on device {self.ordinal}")
            args.append(ctypes.c_uint64(handle.address))
        return args + [ctypes.c_int64(int(value)) for value in vals]

    def __call__(self, *handles: Any, vals: Sequence[int] = (), wait: bool = False) -> float | None:
        args = self.arguments(handles, vals)
        if self.module is None:
            raise RuntimeError(f"CUDA: kernel {self.name!r} was unloaded")
        try:
            if not wait:
                cu.launch(self.ordinal, self.function, self.grid, self.block, args)
                cu.synchronize(self.ordinal)
                return None
            return self._timed(args)
        except cu.CudaDriverError as error:
            raise cu.CudaDriverError(f"{error} (kernel {self.name!r}, grid {self.grid}, block {self.block})") \
                from error

    def _timed(self, args: list[ctypes.c_uint64 | ctypes.c_int64]) -> float:
        """Launch between two events; the seconds between them (the kernel has finished)."""
        start, end = cu.event_create(self.ordinal), cu.event_create(self.ordinal)
        try:
            cu.event_record(self.ordinal, start)
            cu.launch(self.ordinal, self.function, self.grid, self.block, args)
            cu.event_record(self.ordinal, end)
            seconds = cu.event_seconds(self.ordinal, start, end)
            cu.synchronize(self.ordinal)
            return seconds
        finally:
            cu.event_destroy(self.ordinal, start)
            cu.event_destroy(self.ordinal, end)


class CudaLoader:
    """`Compiled.runtime` for device `ordinal`: (name, library, launch_dims) -> CudaProgram."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal

    def __call__(self, name: str, lib: bytes, launch_dims: Any) -> CudaProgram:
        return CudaProgram(self.ordinal, name, lib, launch_dims)


def ordinal_of(device_name: str) -> int:
    """0 for `CUDA`, N for `CUDA:N`; ValueError for any other name."""
    kind, colon, number = device_name.partition(":") if isinstance(device_name, str) else ("", "", "")
    if kind != "CUDA" or (colon and not (number.isascii() and number.isdigit())):
        raise ValueError(f"cuda.create: {device_name!r} is not a CUDA device name")
    return int(number) if colon else 0


def device_arch(ordinal: int) -> str:
    """The NVRTC target for device `ordinal`: its compute capability with a driver, else CUDA_ARCH."""
    if cu.driver_available():
        major, minor = cu.compute_capability(ordinal)
        return f"sm_{major}{minor}"
    return config.get().cuda_arch


def create(device_name: str) -> Compiled:
    """The `Compiled` for `CUDA` or `CUDA:N` (needs no driver: see the module docstring)."""
    ordinal = ordinal_of(device_name)
    from fast.renderer.cuda import CUDARenderer  # written separately; imported only when a device is made

    return Compiled(device_name, CudaAllocator(ordinal), CUDARenderer(), NVRTCCompiler(device_arch(ordinal)),
                    CudaLoader(ordinal), can_run=lambda: cu.driver_available() and ordinal < cu.device_count())
