"""The CUDA runtime: NVRTC (search, compile, cache), the driver bindings and the CUDA device.

Three kinds of tests:
- NVRTC tests run wherever the `nvidia-cuda-nvrtc` wheel is installed (the `test` extra installs it).
- Driver-binding tests run everywhere against a fake libcuda (C below, built with the C compiler the
  CLANG device uses): device memory is host memory and launches are recorded, not run; a context must
  be current on the calling thread for every call, as with the real driver.
- GPU tests need a real driver and device and skip with "no CUDA driver/GPU" elsewhere.
"""
from __future__ import annotations

import ctypes
import gc
import importlib.metadata
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import fast
from fast import LazyBuffer, config, dtypes
from fast.device import Buffer, Device
from fast.ops import BinaryOps, LoadOps
from fast.renderer.base import Renderer
from fast.runtime import cuda, nvrtc
from fast.runtime import cuda_driver as cu
from fast.runtime.base import COMPILE_COUNTER
from fast.runtime.clang import compiler_path
from fast.runtime.host import HostAllocator

FMA_KERNEL = r"""typedef long long int64_t;
extern "C" __global__ void mul_add(float* out, const float* a, const float* b, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i] + a[i];
}
"""
VALUES_KERNEL = r"""typedef long long int64_t;
extern "C" __global__ void put_values(int64_t* out, int64_t* fill, int64_t v0, int64_t v1, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i == 0) { out[0] = v0; out[1] = v1; }
  if (i < n) fill[i] = v0 + i;
}
"""


def _wheel_library() -> Path | None:
    """The libnvrtc of the installed nvidia-cuda-nvrtc wheel (found from its file list), or None."""
    try:
        files = importlib.metadata.distribution("nvidia-cuda-nvrtc").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = [Path(str(file.locate())) for file in files if file.name.startswith("libnvrtc.so.")]
    return found[0].resolve() if found else None


WHEEL = _wheel_library()
needs_wheel = pytest.mark.skipif(WHEEL is None, reason="the nvidia-cuda-nvrtc wheel is not installed")
needs_gpu = pytest.mark.skipif(not cu.driver_available(), reason="no CUDA driver/GPU")


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    with config.override(cache_dir=str(tmp_path / "cache"), disable_compile_cache=False):
        yield tmp_path / "cache"


@pytest.fixture
def fresh_devices(monkeypatch: pytest.MonkeyPatch) -> bool:
    """An empty device registry for the test, so devices made under a fake driver never leak, and a
    CUDA renderer: the real one (True), or a stand-in that renders nothing while it is not written."""
    monkeypatch.setattr(Device, "opened", {})
    try:
        importlib.import_module("fast.renderer.cuda")
        return True
    except ModuleNotFoundError as error:
        if error.name != "fast.renderer.cuda":
            raise
        stub = types.ModuleType("fast.renderer.cuda")

        class CUDARenderer(Renderer):
            def launch_dims(self, program: object) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
                return (1, 1, 1), (1, 1, 1)

            def render(self, program: object) -> str:
                raise NotImplementedError("stand-in CUDA renderer")

        stub.CUDARenderer = CUDARenderer  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "fast.renderer.cuda", stub)
        return False


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch, fresh_devices: bool) -> bool:
    """Driver library names that do not exist: what a machine without a CUDA driver sees (True when
    the real CUDA renderer is there)."""
    monkeypatch.setattr(cu, "LIBRARY_NAMES", ("libcuda-missing-for-test.so.1", "libcuda-missing-for-test.so"))
    return fresh_devices


@pytest.fixture(scope="session")
def fake_libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The fake libcuda built three ways: "ok" (one device), "no devices", "init fails"."""
    directory = tmp_path_factory.mktemp("fakecuda")
    (directory / "fake_cuda.c").write_text(FAKE_LIBCUDA_C)
    built = {}
    for kind, defines in (("ok", []), ("no devices", ["-DDEVICES=0"]), ("init fails", ["-DINIT_RESULT=100"])):
        output = directory / f"libfakecuda-{kind.replace(' ', '-')}.so"
        subprocess.run([compiler_path(), *defines, "-shared", "-fPIC", "-O1", "-o", str(output),
                        str(directory / "fake_cuda.c")], check=True, capture_output=True)
        built[kind] = str(output)
    return built


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, fresh_devices: bool,
         fake_libraries: dict[str, str]) -> Iterator[ctypes.CDLL]:
    """The fake libcuda as the driver; its test hooks through the returned library."""
    monkeypatch.setattr(cu, "LIBRARY_NAMES", (fake_libraries["ok"],))
    hooks = ctypes.CDLL(fake_libraries["ok"])
    hooks.fake_param.restype = ctypes.c_uint64
    hooks.fake_dim.restype = ctypes.c_uint
    hooks.fake_last_name.restype = ctypes.c_char_p
    yield hooks
    gc.collect()  # buffers and programs of the test are freed by the fake, before the real driver is back


# ---------------------------------------------------------------- NVRTC


@needs_wheel
def test_the_search_finds_the_pip_wheel_first() -> None:
    assert nvrtc.nvrtc_available()
    assert Path(nvrtc.library().path).resolve() == WHEEL
    assert nvrtc.nvrtc_version() >= (12, 0)
    origins = [candidate.origin for candidate in nvrtc.find_candidates(config.Config(cuda_path="/a", cuda_home="/b"))]
    first_other = origins.index("CUDA_PATH")
    assert set(origins[:first_other]) == {"pip wheel"} and origins[first_other:first_other + 3] == [
        "CUDA_PATH", "CUDA_HOME", "CUDA toolkit"]


@needs_wheel
def test_nvrtc_path_is_the_only_candidate_and_must_load(tmp_path: Path) -> None:
    assert WHEEL is not None
    for setting in (str(WHEEL), str(WHEEL.parent)):
        with config.override(nvrtc_path=setting):
            assert Path(nvrtc.library().path).resolve() == WHEEL
            assert [c.origin for c in nvrtc.find_candidates()] == ["NVRTC_PATH"]
    with config.override(nvrtc_path=str(tmp_path / "libnvrtc.so.99")):
        assert not nvrtc.nvrtc_available()
        with pytest.raises(nvrtc.NVRTCNotFoundError, match="libnvrtc.so.99"):
            nvrtc.compile_cuda(FMA_KERNEL, "sm_90")
    (tmp_path / "libnvrtc.so.13").symlink_to(WHEEL)  # a library whose builtins are not beside it
    with config.override(nvrtc_path=str(tmp_path / "libnvrtc.so.13")), \
            pytest.raises(nvrtc.NVRTCNotFoundError, match="^NVRTC: .* was found but libnvrtc-builtins") as info:
        nvrtc.library()
    assert str(tmp_path) in str(info.value)


@needs_wheel
def test_toolkit_directories_and_the_linker_are_searched_after_the_wheels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert WHEEL is not None
    nvrtc.library()  # loaded once: the linker then finds libnvrtc.so.N by its soname
    monkeypatch.setattr(nvrtc, "_site_directories", lambda: [])
    monkeypatch.setattr(nvrtc, "SYSTEM_DIRECTORIES", ())
    monkeypatch.setattr(nvrtc.ctypes.util, "find_library", lambda name: None)
    with config.override(cuda_path="", cuda_home=""):
        assert not nvrtc.nvrtc_available()
    toolkit = tmp_path / "toolkit" / "lib64"
    toolkit.mkdir(parents=True)
    (toolkit / "libnvrtc.so").symlink_to(WHEEL)
    for builtins in WHEEL.parent.glob("libnvrtc-builtins.so*"):
        (toolkit / builtins.name).symlink_to(builtins)
    with config.override(cuda_path="", cuda_home=str(tmp_path / "toolkit")):
        assert nvrtc.library().path == str(toolkit / "libnvrtc.so")
    monkeypatch.setattr(nvrtc.ctypes.util, "find_library", lambda name: WHEEL.name if name == "nvrtc" else None)
    with config.override(cuda_path="", cuda_home=""):
        assert Path(nvrtc.library().path).resolve() == WHEEL  # dladdr told where the soname came from


@needs_wheel
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_kernel_compiles_to_ptx_and_a_cubin(arch: str) -> None:
    binary = nvrtc.compile_cuda(FMA_KERNEL, arch)
    assert binary.ptx.startswith(b"//\n// Generated by NVIDIA NVVM Compiler") and b"\0" not in binary.ptx
    assert f".target {arch}".encode() in binary.ptx and b".visible .entry mul_add(" in binary.ptx
    assert binary.cubin is not None and binary.cubin.startswith(b"\x7fELF")
    assert b"fma" not in binary.ptx and b"mul.rn.f32" in binary.ptx  # --fmad=false: no contraction


@needs_wheel
def test_the_semantics_flags_are_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert nvrtc.SEMANTIC_FLAGS == ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", "-std=c++17")
    source = r"""extern "C" __global__ void k(float* x, double* y) {
        x[0] = x[1] / x[2] + sqrtf(x[3]); y[0] = y[1] * y[2] + y[3]; }"""
    ptx = nvrtc.compile_cuda(source, "sm_90").ptx
    assert b"div.rn.f32" in ptx and b"sqrt.rn.f32" in ptx and b".ftz" not in ptx and b"fma" not in ptx
    identity = nvrtc.NVRTCCompiler("sm_90").identity()
    assert all(flag in identity for flag in nvrtc.SEMANTIC_FLAGS) and "sm_90" in identity
    monkeypatch.setattr(nvrtc, "SEMANTIC_FLAGS", ("--fmad=true", "--ftz=true", "--prec-div=false", "--prec-sqrt=false"))
    loose = nvrtc.compile_cuda(source, "sm_90").ptx  # the checks above tell these flags apart
    assert b"div.rn.f32" not in loose and b"sqrt.rn.f32" not in loose and b".ftz" in loose and b"fma" in loose


@needs_wheel
def test_a_syntax_error_raises_with_the_log_and_the_numbered_line() -> None:
    broken = FMA_KERNEL.replace("out[i] = a[i]", "out[i] = = a[i]")
    with pytest.raises(nvrtc.CudaCompileError) as info:
        nvrtc.compile_cuda(broken, "sm_90")
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert "error" in message and "fast_kernel.cu(4)" in message and "sm_90" in message
    assert "> 4 |   if (i < n) out[i] = = a[i]" in message and "  3 |   int64_t i =" in message


@needs_wheel
@pytest.mark.parametrize("arch", ["sm90", "compute_90", "sm_", "sm_9O", "SM_90", "", "sm_90 "])
def test_invalid_arch_strings_are_value_errors(arch: str) -> None:
    with pytest.raises(ValueError, match=repr(arch).replace("[", r"\[")):
        nvrtc.compile_cuda(FMA_KERNEL, arch)
    with pytest.raises(ValueError, match="architecture"):
        nvrtc.NVRTCCompiler(arch)


@needs_wheel
def test_an_arch_nvrtc_does_not_support_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="sm_20.*supports.*sm_90"):
        nvrtc.compile_cuda(FMA_KERNEL, "sm_20")


@needs_wheel
def test_compile_cached_compiles_once_per_identity(cache_dir: Path) -> None:
    source = FMA_KERNEL + f"// {cache_dir}\n"  # unique to this test run
    before = COMPILE_COUNTER.snapshot()
    first = nvrtc.NVRTCCompiler("sm_90").compile_cached(source)
    again = nvrtc.NVRTCCompiler("sm_90").compile_cached(source)
    compiles, lookups, hits = (now - then for now, then in zip(COMPILE_COUNTER.snapshot(), before, strict=True))
    assert first == again and first.startswith(b"\x7fELF") and (compiles, lookups, hits) == (1, 2, 1)
    assert [path.name for path in (cache_dir / "cuda").iterdir()] == [
        nvrtc.NVRTCCompiler("sm_90").cache_key(source) + ".bin"]
    other = nvrtc.NVRTCCompiler("sm_80")
    assert other.identity() != nvrtc.NVRTCCompiler("sm_90").identity()
    assert other.compile_cached(source) != first and COMPILE_COUNTER.snapshot()[0] == before[0] + 2


@needs_wheel
def test_compiles_from_several_threads_agree() -> None:
    results: list[bytes] = []
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            results.append(nvrtc.compile_cuda(FMA_KERNEL.replace("mul_add", f"mul_add{index % 2}"), "sm_90").ptx)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 6 and len(set(results)) == 2


# ---------------------------------------------------------------- the driver bindings, on the fake


def test_the_fake_driver_is_found_and_initialized(fake: ctypes.CDLL) -> None:
    assert cu.driver_available() and cu.device_count() == 1
    assert cu.compute_capability(0) == (9, 0) and cu.device_name(0) == "Fake GPU"
    assert cu.driver_version() == (13, 0)
    assert cuda.device_arch(0) == "sm_90"
    with pytest.raises(RuntimeError, match="no device 1.*1 device"):
        cu.compute_capability(1)


def test_allocation_copies_zeroing_and_poison_on_the_fake(fake: ctypes.CDLL) -> None:
    allocator, live = cuda.CudaAllocator(0), fake.fake_live(0)
    handle = allocator.alloc(24)
    assert handle.pointer != 0 and handle.nbytes == 24 and fake.fake_live(0) == live + 1
    out = np.ones(6, np.int32)
    allocator.copyout(out.data, handle)
    assert out.tolist() == [0] * 6
    data = np.arange(6, dtype=np.int32)
    data.flags.writeable = False  # copyin takes read-only memory
    allocator.copyin(handle, data.data)
    allocator.copyout(out.data, handle)
    assert out.tolist() == list(range(6))
    with config.override(alloc_poison=True):
        poisoned = allocator.alloc(8, zeroed=False)
    raw = np.zeros(8, np.uint8)
    allocator.copyout(raw.data, poisoned)
    assert raw.tolist() == [0xFF] * 8
    with pytest.raises(ValueError, match="copyin: source has 12 bytes, buffer has 24"):
        allocator.copyin(handle, np.zeros(3, np.int32).data)
    with pytest.raises(ValueError, match="read-only"):
        allocator.copyout(memoryview(bytes(24)), handle)
    allocator.free(handle)
    allocator.free(handle)  # again: nothing
    allocator.free(poisoned)
    assert fake.fake_live(0) == live
    with pytest.raises(ValueError, match="after free"):
        allocator.copyout(out.data, handle)


def test_zero_bytes_offsets_and_device_copies_on_the_fake(fake: ctypes.CDLL) -> None:
    allocator, live = cuda.CudaAllocator(0), fake.fake_live(0)
    empty = allocator.alloc(0)
    assert empty.pointer == 0 and fake.fake_live(0) == live
    allocator.copyin(empty, memoryview(b""))
    allocator.copyout(memoryview(bytearray()), empty)
    allocator.free(empty)
    base = allocator.alloc(32)
    allocator.copyin(base, np.arange(8, dtype=np.int32).data)
    view = allocator.offset(base, 8, 12)
    assert view.pointer == base.pointer + 8 and view.root is base
    inner = allocator.offset(view, 4, 4)
    assert inner.pointer == base.pointer + 12 and inner.root is base
    out = np.zeros(3, np.int32)
    allocator.copyout(out.data, view)
    assert out.tolist() == [2, 3, 4]
    copy = allocator.alloc(12, zeroed=False)
    allocator.transfer(copy, view)
    allocator.copyout(out.data, copy)
    assert out.tolist() == [2, 3, 4]
    with pytest.raises(ValueError, match="outside"):
        allocator.offset(base, 24, 12)
    allocator.free(view)  # a view is never freed itself
    assert fake.fake_live(0) == live + 2
    allocator.free(base)
    with pytest.raises(ValueError, match="after free"):
        allocator.copyout(out.data, view)
    allocator.free(copy)
    assert fake.fake_live(0) == live
    with pytest.raises(TypeError, match="CUDA device 0"):
        allocator.copyin(HostAllocator().alloc(4), memoryview(bytes(4)))


def test_driver_errors_name_the_call_and_the_error(fake: ctypes.CDLL) -> None:
    with pytest.raises(cu.CudaDriverError, match=r"cuMemAlloc_v2 failed with CUDA_ERROR_OUT_OF_MEMORY: out of memory"):
        cuda.CudaAllocator(0).alloc(1 << 41)
    with pytest.raises(cu.CudaDriverError, match="cuModuleLoadData failed with CUDA_ERROR_INVALID_IMAGE.*'k'"):
        cuda.CudaProgram(0, "k", b"not an image\0", ((1, 1, 1), (1, 1, 1)))
    with pytest.raises(RuntimeError, match="no kernel named 'missing'.*CUDA_ERROR_NOT_FOUND"):
        cuda.CudaProgram(0, "missing", b"\x7fELF", ((1, 1, 1), (1, 1, 1)))
    assert cu.driver().error_text(999) == "CUresult 999"  # a code the driver has no name for
    assert cu.driver().error_text(2) == "CUDA_ERROR_OUT_OF_MEMORY: out of memory"


def test_a_launch_passes_pointers_values_and_dims_on_the_fake(fake: ctypes.CDLL) -> None:
    allocator = cuda.CudaAllocator(0)
    out, source = allocator.alloc(16), allocator.alloc(64)
    view = allocator.offset(source, 32, 16)
    modules = fake.fake_live(1)
    program = cuda.CudaLoader(0)("mul_add", b"//\n// PTX\0", ((3, 2, 1), (128, 1, 1)))
    fake.fake_expect_params(4)
    launches = fake.fake_launches()
    assert program(out, view, vals=(-5, 2**40)) is None
    assert fake.fake_launches() == launches + 1 and fake.fake_last_name() == b"mul_add"
    assert [fake.fake_dim(i) for i in range(6)] == [3, 2, 1, 128, 1, 1]
    params = [fake.fake_param(i) for i in range(4)]
    assert params == [out.pointer, source.pointer + 32, 2**64 - 5, 2**40]
    events = fake.fake_live(2)
    seconds = program(out, view, vals=(1, 2), wait=True)
    assert seconds == pytest.approx(2.5e-3) and fake.fake_live(2) == events  # events destroyed
    with pytest.raises(TypeError, match="mul_add: buffer 1 is HostMemory"):
        program(out, HostAllocator().alloc(16), vals=(1, 2))
    del program
    assert fake.fake_live(1) == modules  # the module was unloaded with the program
    with pytest.raises(ValueError, match="launch_dims"):
        cuda.CudaProgram(0, "k", b"\x7fELF", ((1, 1), (1, 1, 1)))
    with pytest.raises(ValueError, match="positive"):
        cuda.CudaProgram(0, "k", b"\x7fELF", ((0, 1, 1), (1, 1, 1)))


def test_every_thread_gets_the_context_made_current(fake: ctypes.CDLL) -> None:
    allocator, results = cuda.CudaAllocator(0), []
    handle = allocator.alloc(8)

    def work(value: int) -> None:
        data = np.full(2, value, np.int32)
        allocator.copyin(handle, data.data)
        allocator.copyout(data.data, handle)
        results.append(int(data[0]) == value)

    for value in range(4):  # each new thread has no current context until the runtime sets it
        thread = threading.Thread(target=work, args=(value,))
        thread.start()
        thread.join()
    assert results == [True] * 4
    allocator.free(handle)


def test_buffers_on_the_fake_device_round_trip(fake: ctypes.CDLL) -> None:
    data = np.arange(10, dtype=np.float32)
    device = Device["CUDA"]
    assert device.name == "CUDA" and device.compiler.arch == "sm_90" and Device["CUDA:0"] is device
    with config.override(cuda_arch="sm_80"):  # the GPU's own arch wins over CUDA_ARCH
        assert cuda.create("CUDA").compiler.arch == "sm_90"
    buffer = Buffer("CUDA", 10, dtypes.float32).copyin(data.data)
    np.testing.assert_array_equal(buffer.as_numpy(), data)
    np.testing.assert_array_equal(buffer.view(3, dtypes.float32, 8).as_numpy(), data[2:5])
    staged = fast.from_numpy(data.reshape(2, 5), "CUDA")
    np.testing.assert_array_equal(fast.to_numpy(staged), data.reshape(2, 5))
    assert fast.to_numpy(fast.from_numpy(np.zeros((0, 3), np.int16), "CUDA")).shape == (0, 3)


# ---------------------------------------------------------------- no driver


@pytest.mark.parametrize(("kind", "reason"), [
    ("no devices", "loaded but reports no CUDA device"),
    ("init fails", "loaded but CUDA: cuInit failed with CUDA_ERROR_NO_DEVICE: no CUDA-capable device"),
])
def test_a_driver_without_devices_is_no_driver(monkeypatch: pytest.MonkeyPatch, fake_libraries: dict[str, str],
                                               kind: str, reason: str) -> None:
    monkeypatch.setattr(cu, "LIBRARY_NAMES", ("libcuda-missing-for-test.so.1", fake_libraries[kind]))
    assert not cu.driver_available()
    with pytest.raises(cu.NoCudaDriverError, match="no CUDA driver found") as info:
        cu.driver()
    message = str(info.value)
    assert f"{fake_libraries[kind]} {reason}" in message and "libcuda-missing-for-test.so.1: " in message


def test_this_machine_reports_its_driver_consistently() -> None:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        assert not cu.driver_available()
        with pytest.raises(cu.NoCudaDriverError, match="no CUDA driver found"):
            cu.driver()


def test_without_a_driver_devices_exist_but_memory_does_not(no_driver: bool) -> None:
    assert not cu.driver_available()
    device = Device["CUDA"]
    assert device.name == "CUDA" and isinstance(device.allocator, cuda.CudaAllocator)
    assert device.compiler.arch == config.get().cuda_arch and device.compiler.cache_namespace == "cuda"
    with config.override(cuda_arch="sm_80"):
        assert cuda.create("CUDA:2").compiler.arch == "sm_80" and cuda.create("CUDA:2").allocator.ordinal == 2
    for nbytes in (0, 16):
        with pytest.raises(RuntimeError, match=r"no CUDA driver found \(tried libcuda-missing-for-test.so.1"):
            device.allocator.alloc(nbytes)
    with pytest.raises(RuntimeError, match="no CUDA driver found.*fast.compile"):
        device.runtime("k", b"\x7fELF", ((1, 1, 1), (1, 1, 1)))
    with config.override(cuda_arch="sm90"), pytest.raises(ValueError, match="sm90"):
        cuda.create("CUDA:3")
    for name in ("CLANG", "CUDA:x", "CUDA:", "CUDA:1:2"):
        with pytest.raises(ValueError, match="not a CUDA device name"):
            cuda.create(name)


def test_realizing_a_cuda_graph_without_a_driver_says_so(no_driver: bool, cache_dir: Path) -> None:
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        fast.from_numpy(np.ones(3, np.float32), "CUDA")
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        fast.realize(LazyBuffer.loadop(LoadOps.EMPTY, (4,), dtypes.float32, "CUDA"))
    on_clang = fast.from_numpy(np.ones(3, np.float32), "CLANG")
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        fast.realize(on_clang.copy_to_device("CUDA"))
    if no_driver:  # the real renderer is there: a kernel graph compiles, then cannot allocate
        const = LazyBuffer.loadop(LoadOps.CONST, (), dtypes.float32, "CUDA", 2.0).reshape((1,)).expand((5,))
        with pytest.raises(RuntimeError, match="no CUDA driver"):
            fast.to_numpy(const.e(BinaryOps.ADD, const.const(1.0)))


# ---------------------------------------------------------------- a real GPU


@pytest.fixture
def gpu(fresh_devices: bool, cache_dir: Path) -> cuda.Compiled:
    return Device["CUDA"]


@needs_gpu
def test_gpu_device_uses_its_own_arch(gpu: cuda.Compiled) -> None:
    major, minor = cu.compute_capability(0)
    assert gpu.compiler.arch == f"sm_{major}{minor}" and cu.device_name(0)
    with config.override(cuda_arch="sm_75" if major * 10 + minor != 75 else "sm_80"):
        assert cuda.create("CUDA").compiler.arch == f"sm_{major}{minor}"


@needs_gpu
def test_gpu_allocation_round_trip_zeroing_and_poison(gpu: cuda.Compiled) -> None:
    allocator = gpu.allocator
    rng = np.random.default_rng(0)
    for nbytes in (1, 13, 4096, (1 << 20) + 3):
        data = rng.integers(0, 256, nbytes, dtype=np.uint8)
        handle = allocator.alloc(nbytes)
        out = np.ones(nbytes, np.uint8)
        allocator.copyout(out.data, handle)
        assert not out.any()
        allocator.copyin(handle, data.data)
        allocator.copyout(out.data, handle)
        np.testing.assert_array_equal(out, data)
        allocator.free(handle)
    with config.override(alloc_poison=True):
        poisoned = allocator.alloc(100, zeroed=False)
    out = np.zeros(100, np.uint8)
    allocator.copyout(out.data, poisoned)
    assert (out == 0xFF).all()
    allocator.free(poisoned)


@needs_gpu
def test_gpu_zero_bytes_offsets_and_device_to_device_copies(gpu: cuda.Compiled) -> None:
    allocator = gpu.allocator
    empty = allocator.alloc(0)
    assert empty.pointer == 0
    allocator.copyin(empty, memoryview(b""))
    allocator.free(empty)
    base = allocator.alloc(4096)
    allocator.copyin(base, np.arange(1024, dtype=np.int32).data)
    view = allocator.offset(base, 400, 40)
    out = np.zeros(10, np.int32)
    allocator.copyout(out.data, view)
    assert out.tolist() == list(range(100, 110))
    copy = allocator.alloc(40, zeroed=False)
    allocator.transfer(copy, view)
    allocator.copyin(view, np.full(10, -1, np.int32).data)
    allocator.copyout(out.data, copy)
    assert out.tolist() == list(range(100, 110))
    whole = np.zeros(1024, np.int32)
    allocator.copyout(whole.data, base)
    assert whole[100:110].tolist() == [-1] * 10 and whole[99] == 99 and whole[110] == 110
    allocator.free(copy)
    allocator.free(base)


@needs_gpu
def test_gpu_kernel_runs_unfused_with_timing(gpu: cuda.Compiled) -> None:
    n = 100_003
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    expected = a * b + a  # float32 multiply, rounded, then float32 add: what --fmad=false keeps
    fused = (a.astype(np.float64) * b + a).astype(np.float32)  # (almost always) what an FMA gives
    assert (fused != expected).any()  # so the check below tells the two apart
    handles = [gpu.allocator.alloc(4 * n) for _ in range(3)]
    gpu.allocator.copyin(handles[1], a.data)
    gpu.allocator.copyin(handles[2], b.data)
    program = gpu.runtime("mul_add", gpu.compiler.compile_cached(FMA_KERNEL), (((n + 255) // 256, 1, 1), (256, 1, 1)))
    assert program(*handles, vals=(n,)) is None
    out = np.zeros(n, np.float32)
    gpu.allocator.copyout(out.data, handles[0])
    np.testing.assert_array_equal(out, expected)
    seconds = program(*handles, vals=(n,), wait=True)
    assert seconds is not None and 0 < seconds < 10
    with pytest.raises(TypeError, match="mul_add"):
        program(handles[0], HostAllocator().alloc(4 * n), handles[2], vals=(n,))
    for handle in handles:
        gpu.allocator.free(handle)


@needs_gpu
def test_gpu_kernel_gets_int64_values_and_writes_through_a_view(gpu: cuda.Compiled) -> None:
    out, base = gpu.allocator.alloc(16), gpu.allocator.alloc(8 * 64)
    view = gpu.allocator.offset(base, 8 * 16, 8 * 32)
    lib = nvrtc.compile_cuda(VALUES_KERNEL, gpu.compiler.arch)
    for image in (lib.cubin or b"", lib.ptx + b"\0"):  # both forms NVRTCCompiler may hand over load
        program = gpu.runtime("put_values", image, ((1, 1, 1), (32, 1, 1)))
        program(out, view, vals=(-(2**40), 2**62 + 7, 32))
        values, whole = np.zeros(2, np.int64), np.zeros(64, np.int64)
        gpu.allocator.copyout(values.data, out)
        gpu.allocator.copyout(whole.data, base)
        assert values.tolist() == [-(2**40), 2**62 + 7]
        assert whole[:16].tolist() == [0] * 16 and whole[48:].tolist() == [0] * 16
        assert whole[16:48].tolist() == [-(2**40) + i for i in range(32)]
        gpu.allocator.copyin(base, np.zeros(64, np.int64).data)
    gpu.allocator.free(out)
    gpu.allocator.free(base)


@needs_gpu
def test_gpu_from_several_threads(gpu: cuda.Compiled) -> None:
    results: list[bool] = []

    def work(value: int) -> None:
        handle = gpu.allocator.alloc(64)
        data = np.full(16, value, np.int32)
        gpu.allocator.copyin(handle, data.data)
        data[:] = 0
        gpu.allocator.copyout(data.data, handle)
        gpu.allocator.free(handle)
        results.append(bool((data == value).all()))

    threads = [threading.Thread(target=work, args=(value,)) for value in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 4


@needs_gpu
def test_gpu_realizes_a_graph_with_the_cuda_renderer(gpu: cuda.Compiled) -> None:
    pytest.importorskip("fast.renderer.cuda", reason="the CUDA renderer is not written yet")
    left, right = np.arange(12, dtype=np.float32).reshape(3, 4), np.full((3, 4), 0.5, np.float32)
    total = fast.from_numpy(left, "CUDA").e(BinaryOps.MUL, fast.from_numpy(right, "CUDA"))
    np.testing.assert_array_equal(fast.to_numpy(total), left * right)


FAKE_LIBCUDA_C = r'''
/* A fake libcuda for tests on machines without a GPU: device memory is host memory (malloc),
   launches are recorded (not run), one device of compute capability 9.0. Every call that needs a
   context fails with CUDA_ERROR_INVALID_CONTEXT (201) unless one is current on the calling thread. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef DEVICES
#define DEVICES 1
#endif
#ifndef INIT_RESULT
#define INIT_RESULT 0
#endif
static int initialized, live_allocations, live_modules, live_events, launches, expected_params;
static __thread void *current;
static unsigned last_dims[6];
static uint64_t last_params[8];
static char last_name[256];

#define NEED_CONTEXT if (!current) return 201
int cuInit(unsigned flags) { if (flags) return 1; initialized = !INIT_RESULT; return INIT_RESULT; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { if (!initialized) return 3; *n = DEVICES; return 0; }
int cuDeviceGet(int *d, int ordinal) { if (ordinal != 0) return 101; *d = 7; return 0; }
int cuDeviceGetAttribute(int *v, int attribute, int device) {
  if (device != 7) return 101;
  if (attribute == 75) *v = 9; else if (attribute == 76) *v = 0; else return 1;
  return 0;
}
int cuDeviceGetName(char *name, int length, int device) {
  strncpy(name, "Fake GPU", length); return device == 7 ? 0 : 101;
}
int cuDevicePrimaryCtxRetain(void **context, int device) { *context = (void *)0x1000; return device == 7 ? 0 : 101; }
int cuCtxSetCurrent(void *context) { current = context; return 0; }
int cuCtxSynchronize(void) { NEED_CONTEXT; return 0; }
int cuMemAlloc_v2(uint64_t *pointer, size_t n) {
  NEED_CONTEXT;
  if (n == 0) return 1;
  if (n > ((size_t)1 << 40)) return 2;
  *pointer = (uint64_t)(uintptr_t)malloc(n); live_allocations++; return 0;
}
int cuMemFree_v2(uint64_t pointer) { NEED_CONTEXT; free((void *)(uintptr_t)pointer); live_allocations--; return 0; }
int cuMemsetD8_v2(uint64_t pointer, unsigned char value, size_t n) {
  NEED_CONTEXT; memset((void *)(uintptr_t)pointer, value, n); return 0;
}
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) {
  NEED_CONTEXT; memcpy((void *)(uintptr_t)dst, src, n); return 0;
}
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) {
  NEED_CONTEXT; memcpy(dst, (void *)(uintptr_t)src, n); return 0;
}
int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) {
  NEED_CONTEXT; memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n); return 0;
}
int cuModuleLoadData(void **module, const void *image) {
  NEED_CONTEXT;
  const char *bytes = image;
  if (memcmp(bytes, "\x7f" "ELF", 4) != 0 && strncmp(bytes, "//", 2) != 0) return 200;
  *module = malloc(1); live_modules++; return 0;
}
int cuModuleGetFunction(void **function, void *module, const char *name) {
  NEED_CONTEXT;
  if (!module || strcmp(name, "missing") == 0) return 500;
  *function = (void *)strdup(name); return 0;
}
int cuModuleUnload(void *module) { NEED_CONTEXT; free(module); live_modules--; return 0; }
int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
  NEED_CONTEXT;
  if (shared || stream || extra) return 1;
  unsigned dims[6] = {gx, gy, gz, bx, by, bz};
  memcpy(last_dims, dims, sizeof dims);
  strncpy(last_name, (const char *)function, sizeof last_name - 1);
  for (int i = 0; i < expected_params && i < 8; i++) last_params[i] = *(uint64_t *)params[i];
  launches++; return 0;
}
int cuEventCreate(void **event, unsigned flags) {
  NEED_CONTEXT; *event = calloc(1, sizeof(double)); live_events++; return flags ? 1 : 0;
}
int cuEventRecord(void *event, void *stream) { NEED_CONTEXT; *(double *)event = launches; return stream ? 1 : 0; }
int cuEventSynchronize(void *event) { NEED_CONTEXT; return event ? 0 : 400; }
int cuEventElapsedTime(float *ms, void *start, void *end) {
  NEED_CONTEXT; *ms = 2.5f * (float)(*(double *)end - *(double *)start); return 0;
}
int cuEventDestroy_v2(void *event) { NEED_CONTEXT; free(event); live_events--; return 0; }
static const char *names[][3] = {{"1", "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
  {"2", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"}, {"3", "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
  {"100", "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
  {"101", "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
  {"200", "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
  {"201", "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
  {"500", "CUDA_ERROR_NOT_FOUND", "named symbol not found"}};
static int lookup(int code, const char **out, int column) {
  for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
    if (atoi(names[i][0]) == code) { *out = names[i][column]; return 0; }
  return 1;
}
int cuGetErrorName(int code, const char **out) { return lookup(code, out, 1); }
int cuGetErrorString(int code, const char **out) { return lookup(code, out, 2); }
/* test hooks */
int fake_live(int what) { return what == 0 ? live_allocations : what == 1 ? live_modules : live_events; }
int fake_launches(void) { return launches; }
void fake_expect_params(int n) { expected_params = n; }
unsigned fake_dim(int i) { return last_dims[i]; }
uint64_t fake_param(int i) { return last_params[i]; }
const char *fake_last_name(void) { return last_name; }
'''
