"""The CUDA driver API (`libcuda`) through ctypes: only what runtime/cuda.py needs.

- Loading: `libcuda.so.1`, then `libcuda.so` (`LIBRARY_NAMES`), then `cuInit(0)` and
  `cuDeviceGetCount`. The outcome (the driver, or why there is none) is probed once per process.
  `driver_available()` is True when the library loads, cuInit succeeds and there is at least one
  device; `driver()` returns it or raises `NoCudaDriverError` ("CUDA: no CUDA driver found ...").
- Every call is checked: a non-zero CUresult raises `CudaDriverError` (a RuntimeError) naming the
  call, the error's name and its description (`cuGetErrorName` / `cuGetErrorString`).
- Contexts: one primary context per device ordinal (`cuDevicePrimaryCtxRetain`, retained once and
  never released while the process lives); `Driver.use(ordinal)` makes it current on the calling
  thread (`cuCtxSetCurrent`, cheap) and every operation here calls it first, because the engine
  calls from several threads and a context is current per thread.
- Device pointers are Python ints (`CUdeviceptr` is 64 bits); modules, functions and events are
  opaque `c_void_p` handles. Work goes to the legacy default stream (NULL), which orders it.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence

LIBRARY_NAMES: tuple[str, ...] = ("libcuda.so.1", "libcuda.so")
COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR = 75, 76  # CUdevice_attribute values
AOT_HINT = "kernels for CUDA can still be compiled ahead of time with fast.compile (NVRTC needs no GPU)"

_P, _U, _I, _Z = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
_PP, _PI = ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int)
_PU64 = ctypes.POINTER(ctypes.c_uint64)
#: argtypes of every driver function used (all return CUresult, an int).
SIGNATURES: dict[str, list[type]] = {
    "cuInit": [_U], "cuDriverGetVersion": [_PI], "cuDeviceGetCount": [_PI], "cuDeviceGet": [_PI, _I],
    "cuDeviceGetAttribute": [_PI, _I, _I], "cuDeviceGetName": [ctypes.c_char_p, _I, _I],
    "cuDevicePrimaryCtxRetain": [_PP, _I], "cuCtxSetCurrent": [_P], "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [_PU64, _Z], "cuMemFree_v2": [ctypes.c_uint64],
    "cuMemsetD8_v2": [ctypes.c_uint64, ctypes.c_ubyte, _Z],
    "cuMemcpyHtoD_v2": [ctypes.c_uint64, _P, _Z], "cuMemcpyDtoH_v2": [_P, ctypes.c_uint64, _Z],
    "cuMemcpyDtoD_v2": [ctypes.c_uint64, ctypes.c_uint64, _Z],
    "cuModuleLoadData": [_PP, ctypes.c_char_p], "cuModuleGetFunction": [_PP, _P, ctypes.c_char_p],
    "cuModuleUnload": [_P],
    "cuLaunchKernel": [_P, _U, _U, _U, _U, _U, _U, _U, _P, _PP, _PP],
    "cuEventCreate": [_PP, _U], "cuEventRecord": [_P, _P], "cuEventSynchronize": [_P],
    "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _P, _P], "cuEventDestroy_v2": [_P],
    "cuGetErrorName": [_I, ctypes.POINTER(ctypes.c_char_p)], "cuGetErrorString": [_I, ctypes.POINTER(ctypes.c_char_p)],
}


class CudaDriverError(RuntimeError):
    """A driver call returned an error (the message names the call and the error)."""


class NoCudaDriverError(RuntimeError):
    """There is no usable CUDA driver in this process."""


class Driver:
    """A loaded, initialized libcuda (`lib`, found as `name`) with `count` devices."""

    def __init__(self, name: str, lib: ctypes.CDLL) -> None:
        self.name, self.lib = name, lib
        for function, argtypes in SIGNATURES.items():
            entry = getattr(lib, function)
            entry.argtypes, entry.restype = argtypes, ctypes.c_int
        self._contexts: dict[int, ctypes.c_void_p] = {}
        self._lock = threading.Lock()
        self.call("cuInit", 0)
        count = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(count))
        self.count = count.value

    def error_text(self, result: int) -> str:
        """`NAME: description` of a CUresult (the number when the driver does not know it)."""
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        if self.lib.cuGetErrorName(result, ctypes.byref(name)) != 0 or not name.value:
            return f"CUresult {result}"
        self.lib.cuGetErrorString(result, ctypes.byref(text))
        description = text.value.decode(errors="replace") if text.value else ""
        return f"{name.value.decode(errors='replace')}: {description}" if description else name.value.decode()

    def call(self, function: str, *args: object) -> None:
        """Call `function`; CudaDriverError naming it and the error when it does not return CUDA_SUCCESS."""
        result = getattr(self.lib, function)(*args)
        if result != 0:
            raise CudaDriverError(f"CUDA: {function} failed with {self.error_text(result)}")

    def check_ordinal(self, ordinal: int) -> None:
        if not isinstance(ordinal, int) or not 0 <= ordinal < self.count:
            raise RuntimeError(f"CUDA: no device {ordinal!r}: the driver reports {self.count} device(s)")

    def use(self, ordinal: int) -> None:
        """Make device `ordinal`'s primary context current on this thread (retained on first use)."""
        context = self._contexts.get(ordinal)
        if context is None:
            with self._lock:
                context = self._contexts.get(ordinal)
                if context is None:
                    self.check_ordinal(ordinal)
                    device, context = ctypes.c_int(), ctypes.c_void_p()
                    self.call("cuDeviceGet", ctypes.byref(device), ordinal)
                    self.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
                    self._contexts[ordinal] = context
        self.call("cuCtxSetCurrent", context)

    def attribute(self, ordinal: int, attribute: int) -> int:
        self.check_ordinal(ordinal)
        device, value = ctypes.c_int(), ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(device), ordinal)
        self.call("cuDeviceGetAttribute", ctypes.byref(value), attribute, device)
        return value.value


@functools.cache
def _probe(names: tuple[str, ...]) -> Driver | str:
    """The first of `names` that loads and initializes, or the reasons none did."""
    reasons: list[str] = []
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError as error:
            reasons.append(f"{name}: {error}")
            continue
        try:
            found = Driver(name, lib)
        except (CudaDriverError, AttributeError) as error:
            reasons.append(f"{name} loaded but {error}")
            continue
        if found.count > 0:
            return found
        reasons.append(f"{name} loaded but reports no CUDA device")
    return "; ".join(reasons)


def driver() -> Driver:
    """The CUDA driver; NoCudaDriverError saying why when there is none."""
    found = _probe(LIBRARY_NAMES)
    if isinstance(found, Driver):
        return found
    raise NoCudaDriverError(f"CUDA: no CUDA driver found (tried {', '.join(LIBRARY_NAMES)}): {found}; {AOT_HINT}")


def driver_available() -> bool:
    """Whether a CUDA driver loads, initializes and has at least one device."""
    return isinstance(_probe(LIBRARY_NAMES), Driver)


def device_count() -> int:
    return driver().count


def driver_version() -> tuple[int, int]:
    """The newest CUDA version the driver supports, as (major, minor): 12040 -> (12, 4)."""
    version = ctypes.c_int()
    driver().call("cuDriverGetVersion", ctypes.byref(version))
    return version.value // 1000, version.value % 1000 // 10


def compute_capability(ordinal: int) -> tuple[int, int]:
    """(major, minor) of device `ordinal`."""
    found = driver()
    return found.attribute(ordinal, COMPUTE_CAPABILITY_MAJOR), found.attribute(ordinal, COMPUTE_CAPABILITY_MINOR)


def device_name(ordinal: int) -> str:
    found = driver()
    found.check_ordinal(ordinal)
    device, name = ctypes.c_int(), ctypes.create_string_buffer(256)
    found.call("cuDeviceGet", ctypes.byref(device), ordinal)
    found.call("cuDeviceGetName", name, len(name), device)
    return name.value.decode(errors="replace")


def active(ordinal: int) -> Driver:
    """The driver, with device `ordinal`'s primary context current on this thread."""
    found = driver()
    found.use(ordinal)
    return found


def mem_alloc(ordinal: int, nbytes: int) -> int:
    """A new device allocation of `nbytes` (> 0) bytes; its address."""
    pointer = ctypes.c_uint64()
    active(ordinal).call("cuMemAlloc_v2", ctypes.byref(pointer), nbytes)
    return pointer.value


def mem_free(ordinal: int, pointer: int) -> None:
    active(ordinal).call("cuMemFree_v2", pointer)


def memset_d8(ordinal: int, pointer: int, value: int, nbytes: int) -> None:
    active(ordinal).call("cuMemsetD8_v2", pointer, value, nbytes)


def memcpy_htod(ordinal: int, destination: int, source: int, nbytes: int) -> None:
    """Copy `nbytes` from host address `source` to device address `destination` (synchronous)."""
    active(ordinal).call("cuMemcpyHtoD_v2", destination, source, nbytes)


def memcpy_dtoh(ordinal: int, destination: int, source: int, nbytes: int) -> None:
    """Copy `nbytes` from device address `source` to host address `destination` (synchronous)."""
    active(ordinal).call("cuMemcpyDtoH_v2", destination, source, nbytes)


def memcpy_dtod(ordinal: int, destination: int, source: int, nbytes: int) -> None:
    active(ordinal).call("cuMemcpyDtoD_v2", destination, source, nbytes)


def synchronize(ordinal: int) -> None:
    active(ordinal).call("cuCtxSynchronize")


def module_load(ordinal: int, image: bytes) -> ctypes.c_void_p:
    """Load a cubin or NUL-terminated PTX `image` into device `ordinal`'s context."""
    module = ctypes.c_void_p()
    active(ordinal).call("cuModuleLoadData", ctypes.byref(module), image)
    return module


def module_function(ordinal: int, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
    function = ctypes.c_void_p()
    active(ordinal).call("cuModuleGetFunction", ctypes.byref(function), module, name.encode())
    return function


def module_unload(ordinal: int, module: ctypes.c_void_p) -> None:
    active(ordinal).call("cuModuleUnload", module)


def launch(ordinal: int, function: ctypes.c_void_p, grid: Sequence[int], block: Sequence[int],
           args: Sequence[ctypes.c_uint64 | ctypes.c_int64]) -> None:
    """Launch `function` on the default stream; `args` are the kernel's parameters in order (each
    passed by address, as `kernelParams` wants). Asynchronous: see `synchronize`."""
    params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(arg) for arg in args)) if args else None
    active(ordinal).call("cuLaunchKernel", function, *grid, *block, 0, None, params, None)


def event_create(ordinal: int) -> ctypes.c_void_p:
    event = ctypes.c_void_p()
    active(ordinal).call("cuEventCreate", ctypes.byref(event), 0)
    return event


def event_record(ordinal: int, event: ctypes.c_void_p) -> None:
    active(ordinal).call("cuEventRecord", event, None)


def event_seconds(ordinal: int, start: ctypes.c_void_p, end: ctypes.c_void_p) -> float:
    """Seconds between two recorded events, once `end` has completed (waits for it)."""
    found = active(ordinal)
    found.call("cuEventSynchronize", end)
    milliseconds = ctypes.c_float()
    found.call("cuEventElapsedTime", ctypes.byref(milliseconds), start, end)
    return milliseconds.value * 1e-3


def event_destroy(ordinal: int, event: ctypes.c_void_p) -> None:
    active(ordinal).call("cuEventDestroy_v2", event)
