"""NVRTC, NVIDIA's runtime compiler, through ctypes: CUDA C source -> PTX and cubin, no GPU needed.

Finding the library (`find_candidates`, first that loads wins; `nvrtc_available()` says whether any does):
1. `config.get().nvrtc_path` (env `NVRTC_PATH`): a `libnvrtc.so*` file or the directory holding it.
   When set it is the only candidate: failing to load it is an error, never a silent fall-back.
2. The pip wheels, under each `sys.path` entry, then `site.getsitepackages()` and the user site:
   `nvidia/cu13/lib/libnvrtc.so.13` (`nvidia-cuda-nvrtc`, CUDA 13) and
   `nvidia/cuda_nvrtc/lib/libnvrtc.so.12` (`nvidia-cuda-nvrtc-cu12`, CUDA 12).
3. A CUDA toolkit: `$CUDA_PATH/lib64`, `$CUDA_HOME/lib64` (both read by fast/config.py), then
   `/usr/local/cuda/lib64` (`libnvrtc.so`, else the highest-versioned `libnvrtc.so.N`).
4. `ctypes.util.find_library("nvrtc")` (the dynamic linker's own search).

NVRTC loads `libnvrtc-builtins.so.<version>` from its own directory when it compiles; we load it
first, explicitly and RTLD_GLOBAL, from the directory of the libnvrtc chosen (for 4, found after
loading with `dladdr`), so a broken install fails here with a message naming the missing file
instead of in the middle of a compile. The loaded library is cached per search inputs.

Compiling (`compile_cuda(source, arch)`): `--gpu-architecture=<arch>` (`sm_` + digits, checked
against `nvrtcGetSupportedArchs`) plus `SEMANTIC_FLAGS`: `--fmad=false` (a*b+c is never contracted
into an FMA: docs/semantics.md), `--ftz=false` (denormals kept), `--prec-div=true` and
`--prec-sqrt=true` (IEEE-rounded division and square root), `-std=c++17`. A compile error raises
`CudaCompileError` (a RuntimeError) with NVRTC's log and the numbered source lines around each
error. The program is destroyed on every path. NVRTC calls are serialized by one lock (kernels are
compiled from several threads).

`NVRTCCompiler.compile` returns the cubin (an ELF for exactly that sm_XY) when NVRTC produced one,
else the PTX text followed by one NUL byte: both are what `cuModuleLoadData` accepts as is.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import re
import site
import sys
import threading
from dataclasses import dataclass

from fast import config
from fast.runtime.base import Compiler

WHEEL_LIBRARIES: tuple[str, ...] = ("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
SYSTEM_DIRECTORIES: tuple[str, ...] = ("/usr/local/cuda/lib64",)
SEMANTIC_FLAGS: tuple[str, ...] = ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", "-std=c++17")
PROGRAM_NAME = "fast_kernel.cu"
_ARCH = re.compile(r"sm_([0-9]+)", re.ASCII)
_LOCK = threading.Lock()


class NVRTCNotFoundError(RuntimeError):
    """No usable NVRTC library (the message lists every candidate tried and why it failed)."""


class CudaCompileError(RuntimeError):
    """NVRTC rejected the source; the message holds its log and the numbered source lines."""


@dataclass(frozen=True)
class CudaBinary:
    """What NVRTC produced: `ptx` (text, without the trailing NUL), `cubin` (ELF, None when NVRTC made
    none) and the compile `log` (warnings; empty when there were none)."""

    ptx: bytes
    cubin: bytes | None
    log: str


@dataclass(frozen=True)
class Candidate:
    """One place to look: `where` (a path, or a bare soname for the linker's search), `origin` (which
    search step produced it), `strict` (configured explicitly: failing to load it is an error)."""

    where: str
    origin: str
    strict: bool = False

    def resolve(self) -> str:
        """The path or soname to load (the linker's search runs only now: it starts subprocesses)."""
        if self.origin != "find_library":
            return self.where
        found = ctypes.util.find_library("nvrtc")
        if not found:
            raise FileNotFoundError("ctypes.util.find_library('nvrtc') found nothing")
        return found


def check_arch(arch: str) -> int:
    """The number of an `sm_XY` architecture string; ValueError naming anything else."""
    match = _ARCH.fullmatch(arch) if isinstance(arch, str) else None
    if match is None:
        raise ValueError(f"NVRTC: invalid CUDA architecture {arch!r} (expected sm_ followed by digits, e.g. sm_90)")
    return int(match.group(1))


def _library_in(directory: str) -> str | None:
    """`libnvrtc.so` in `directory`, else its highest-versioned `libnvrtc.so.N`, else None."""
    plain = os.path.join(directory, "libnvrtc.so")
    if os.path.exists(plain):
        return plain
    versioned = glob.glob(os.path.join(glob.escape(directory), "libnvrtc.so.*"))
    return max(versioned, key=_version_key) if versioned else None


def _version_key(path: str) -> tuple[int, ...]:
    """`lib...so.13.5` -> (13, 5): orders versioned library files."""
    suffix = os.path.basename(path).partition(".so")[2]
    return tuple(int(part) for part in suffix.split(".") if part.isdigit())


def _site_directories() -> list[str]:
    """Where wheels may live: `sys.path`, then the site packages (user site last), duplicates dropped."""
    places = list(sys.path)
    try:
        places += site.getsitepackages()
    except AttributeError:  # pragma: no cover - some embedded interpreters lack it
        pass
    places.append(site.getusersitepackages())
    return list(dict.fromkeys(os.path.abspath(place) for place in places if place))


def find_candidates(settings: config.Config | None = None) -> list[Candidate]:
    """The libraries to try, in the module docstring's order (paths need not exist)."""
    settings = settings or config.get()
    if settings.nvrtc_path:
        path = settings.nvrtc_path
        chosen = (_library_in(path) or os.path.join(path, "libnvrtc.so")) if os.path.isdir(path) else path
        return [Candidate(chosen, "NVRTC_PATH", strict=True)]
    found = [Candidate(os.path.join(place, wheel), "pip wheel")
             for place in _site_directories() for wheel in WHEEL_LIBRARIES]
    for origin, root in (("CUDA_PATH", settings.cuda_path), ("CUDA_HOME", settings.cuda_home)):
        if root:
            found.append(Candidate(_library_in(os.path.join(root, "lib64")) or os.path.join(root, "lib64",
                                                                                          "libnvrtc.so"), origin))
    for directory in SYSTEM_DIRECTORIES:
        found.append(Candidate(_library_in(directory) or os.path.join(directory, "libnvrtc.so"), "CUDA toolkit"))
    found.append(Candidate("nvrtc", "find_library"))  # resolved only when reached (`Candidate.resolve`)
    return found


def builtins_path(library_path: str) -> str:
    """The `libnvrtc-builtins.so*` beside `library_path` (matching its major version when it has one);
    NVRTCNotFoundError naming the file and directory when there is none."""
    directory = os.path.dirname(os.path.abspath(library_path))
    major = _version_key(library_path)[:1]
    files = glob.glob(os.path.join(glob.escape(directory), "libnvrtc-builtins.so*"))
    matching = [path for path in files if not major or _version_key(path)[:1] in (major, ())]
    if not matching:
        raise NVRTCNotFoundError(
            f"NVRTC: {library_path} was found but libnvrtc-builtins.so{'.' + str(major[0]) if major else ''}.* "
            f"is missing from {directory}; NVRTC cannot compile without it (reinstall the NVRTC package)")
    return max(matching, key=lambda path: (_version_key(path), len(path)))


class NVRTCLibrary:
    """A loaded libnvrtc (`lib`) and the builtins library loaded for it; `path` is where it was found."""

    def __init__(self, path: str, lib: ctypes.CDLL, builtins: ctypes.CDLL) -> None:
        self.path, self.lib, self.builtins = path, lib, builtins
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p,
                                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        for getter in ("ProgramLog", "PTX", "CUBIN"):
            getattr(lib, f"nvrtcGet{getter}Size").argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
            getattr(lib, f"nvrtcGet{getter}").argtypes = [ctypes.c_void_p, ctypes.c_char_p]

    def check(self, call: str, result: int) -> None:
        """RuntimeError naming `call` and NVRTC's error string when `result` is not NVRTC_SUCCESS."""
        if result != 0:
            text = self.lib.nvrtcGetErrorString(result)
            raise RuntimeError(f"NVRTC: {call} failed with {result} "
                               f"({text.decode(errors='replace') if text else 'unknown error'})")

    @functools.cached_property
    def version(self) -> tuple[int, int]:
        """(major, minor)."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check("nvrtcVersion", self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)))
        return major.value, minor.value

    @functools.cached_property
    def supported_archs(self) -> tuple[int, ...]:
        """The XY of every sm_XY this NVRTC compiles for."""
        count = ctypes.c_int()
        self.check("nvrtcGetNumSupportedArchs", self.lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)))
        archs = (ctypes.c_int * count.value)()
        self.check("nvrtcGetSupportedArchs", self.lib.nvrtcGetSupportedArchs(archs))
        return tuple(archs)

    def output(self, program: ctypes.c_void_p, what: str) -> bytes:
        """`nvrtcGet<what>` (ProgramLog, PTX or CUBIN) of a compiled program, exactly as NVRTC sized it."""
        size = ctypes.c_size_t()
        self.check(f"nvrtcGet{what}Size", getattr(self.lib, f"nvrtcGet{what}Size")(program, ctypes.byref(size)))
        if size.value == 0:
            return b""
        data = ctypes.create_string_buffer(size.value)
        self.check(f"nvrtcGet{what}", getattr(self.lib, f"nvrtcGet{what}")(program, data))
        return data.raw


def _loaded_path(lib: ctypes.CDLL, symbol: str) -> str:
    """The file a library loaded by soname came from (dladdr of one of its functions)."""

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    info = DlInfo()
    address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p)
    process = ctypes.CDLL(None)
    process.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    if not process.dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        raise NVRTCNotFoundError(f"NVRTC: cannot tell which file {lib._name} was loaded from")
    return os.fsdecode(info.dli_fname)


def _load_one(candidate: Candidate) -> NVRTCLibrary:
    """Load one candidate (builtins first when its directory is known); OSError/NVRTCNotFoundError."""
    where = candidate.resolve()
    if os.sep in where:
        if not os.path.exists(where):
            raise FileNotFoundError(f"{where} does not exist")
        builtins = ctypes.CDLL(builtins_path(where), mode=ctypes.RTLD_GLOBAL)
        return NVRTCLibrary(where, ctypes.CDLL(where), builtins)
    lib = ctypes.CDLL(where)
    path = _loaded_path(lib, "nvrtcVersion")
    return NVRTCLibrary(path, lib, ctypes.CDLL(builtins_path(path), mode=ctypes.RTLD_GLOBAL))


@functools.cache
def _load(candidates: tuple[Candidate, ...]) -> NVRTCLibrary:
    """The first candidate that loads (cached per candidate list; failures are not cached)."""
    failures: list[str] = []
    for candidate in candidates:
        try:
            return _load_one(candidate)
        except NVRTCNotFoundError as error:
            if candidate.strict:
                raise
            failures.append(f"{candidate.origin} {candidate.where}: {error}")
        except (OSError, AttributeError) as error:
            if candidate.strict:
                raise NVRTCNotFoundError(f"NVRTC: cannot load {candidate.where} (from NVRTC_PATH): {error}") from error
            failures.append(f"{candidate.origin} {candidate.where}: {error}")
    wheels = sum(1 for candidate in candidates if candidate.origin == "pip wheel")
    shown = [line for line in failures if not line.startswith("pip wheel") or "does not exist" not in line]
    raise NVRTCNotFoundError(
        "NVRTC: no libnvrtc found (install it with `pip install nvidia-cuda-nvrtc`, or set NVRTC_PATH); "
        f"searched {wheels} pip wheel locations, CUDA_PATH/CUDA_HOME, {', '.join(SYSTEM_DIRECTORIES)} and the "
        "dynamic linker" + ("".join(f"\n  {line}" for line in shown) if shown else ""))


def library() -> NVRTCLibrary:
    """The NVRTC library for the configuration in force; NVRTCNotFoundError when there is none."""
    return _load(tuple(find_candidates()))


def nvrtc_available() -> bool:
    """Whether an NVRTC library (and its builtins) can be loaded."""
    try:
        library()
    except NVRTCNotFoundError:
        return False
    return True


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor) version; NVRTCNotFoundError without NVRTC."""
    return library().version


def _numbered_excerpt(source: str, log: str, context: int = 2, most: int = 3) -> str:
    """Numbered source lines around the first `most` lines the log reports errors on (the whole
    source, numbered, when it names none)."""
    lines = source.splitlines()
    pattern = re.escape(PROGRAM_NAME) + r"\(([0-9]+)\): (?:catastrophic )?error"
    wanted = list(dict.fromkeys(int(number) for number in re.findall(pattern, log)))[:most]
    shown = sorted({row for line in wanted for row in range(line - context, line + context + 1)
                    if 1 <= row <= len(lines)}) or list(range(1, len(lines) + 1))
    width = len(str(len(lines)))
    marks = set(wanted)
    return "\n".join(f"{'>' if row in marks else ' '} {row:>{width}} | {lines[row - 1]}" for row in shown)


def _compile_locked(nvrtc: NVRTCLibrary, source: str, arch: str) -> CudaBinary:
    """Create, compile, read and always destroy one NVRTC program (caller holds `_LOCK`)."""
    options = (f"--gpu-architecture={arch}", *SEMANTIC_FLAGS)
    program = ctypes.c_void_p()
    nvrtc.check("nvrtcCreateProgram", nvrtc.lib.nvrtcCreateProgram(
        ctypes.byref(program), source.encode(), PROGRAM_NAME.encode(), 0, None, None))
    try:
        result = nvrtc.lib.nvrtcCompileProgram(program, len(options),
                                               (ctypes.c_char_p * len(options))(*(o.encode() for o in options)))
        log = nvrtc.output(program, "ProgramLog").rstrip(b"\0").decode(errors="replace").strip()
        if result != 0:
            error = nvrtc.lib.nvrtcGetErrorString(result) or b"unknown error"
            raise CudaCompileError(
                f"CUDA: NVRTC {'.'.join(map(str, nvrtc.version))} failed to compile {PROGRAM_NAME} for {arch} "
                f"({error.decode(errors='replace')}):\n{log}\n--- source ---\n{_numbered_excerpt(source, log)}")
        ptx = nvrtc.output(program, "PTX").rstrip(b"\0")
        cubin = nvrtc.output(program, "CUBIN") or None
    finally:
        nvrtc.check("nvrtcDestroyProgram", nvrtc.lib.nvrtcDestroyProgram(ctypes.byref(program)))
    return CudaBinary(ptx, cubin, log)


def compile_cuda(source: str, arch: str) -> CudaBinary:
    """Compile CUDA C `source` for `arch` (sm_XY) with `SEMANTIC_FLAGS`. ValueError for a malformed
    or unsupported arch, CudaCompileError (log + numbered source) when NVRTC rejects the source,
    NVRTCNotFoundError without NVRTC. Thread-safe."""
    number = check_arch(arch)
    if not isinstance(source, str):
        raise TypeError(f"compile_cuda: source must be a str, got {type(source).__name__}")
    nvrtc = library()
    if number not in nvrtc.supported_archs:
        supported = ", ".join(f"sm_{value}" for value in nvrtc.supported_archs)
        raise ValueError(f"NVRTC {'.'.join(map(str, nvrtc.version))} cannot compile for {arch} "
                         f"(it supports {supported})")
    with _LOCK:
        return _compile_locked(nvrtc, source, arch)


class NVRTCCompiler(Compiler):
    """CUDA C -> a cubin for `arch` (or NUL-terminated PTX when NVRTC makes no cubin): what
    `cuModuleLoadData` loads. The identity covers the NVRTC version, arch, flags and output format."""

    cache_namespace = "cuda"

    def __init__(self, arch: str) -> None:
        check_arch(arch)
        self.arch = arch

    def identity(self) -> str:
        major, minor = nvrtc_version()
        return f"nvrtc {major}.{minor}\n{self.arch}\n{' '.join(SEMANTIC_FLAGS)}\ncubin, else ptx + NUL"

    def compile(self, src: str) -> bytes:
        binary = compile_cuda(src, self.arch)
        return binary.cubin if binary.cubin else binary.ptx + b"\0"
