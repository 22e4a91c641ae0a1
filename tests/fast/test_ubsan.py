"""The edge-value kernels (every op x dtype, casts, constants, masked loads, 64-bit indices) compiled
with UBSAN (-fsanitize=undefined, float-cast-overflow on GCC, no recovery) must run clean."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fast.runtime.clang import compiler_path

ROOT = Path(__file__).resolve().parents[2]


def ubsan_unsupported_reason(tmp_path: Path) -> str | None:
    """Why the compiler cannot build a UBSAN shared library, or None when it can."""
    source = tmp_path / "probe.c"
    source.write_text("int probe(int x) { return x + 1; }\n")
    command = [compiler_path(), "-shared", "-fPIC", "-fsanitize=undefined", "-o", str(tmp_path / "probe.so"),
               str(source)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    return None if result.returncode == 0 else f"{compiler_path()} cannot build with -fsanitize=undefined: " \
                                               f"{result.stderr.strip()[:200]}"


def test_edge_kernels_run_clean_under_ubsan(tmp_path):
    reason = ubsan_unsupported_reason(tmp_path)
    if reason is not None:
        pytest.skip(reason)
    env = {**os.environ, "UBSAN": "1", "FAST_CACHE_DIR": str(tmp_path / "cache"), "DISABLE_COMPILER_CACHE": "0"}
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'base'}",
               "-k", "not noopt",
               "tests/fast/test_renderer_c.py",
               "tests/fast/test_codegen.py::test_masked_loads_through_movement_ops",
               "tests/fast/test_codegen.py::test_index_arithmetic_beyond_2_pow_31_is_int64",
               "tests/fast/test_codegen.py::test_integer_and_bool_reductions_wrap"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600)
    output = result.stdout + result.stderr
    assert "runtime error" not in output, output[-4000:]
    assert result.returncode == 0, output[-4000:]
    assert " passed" in output and "skipped" not in output
    libraries = list(tmp_path.glob("**/clang-lib/*.so"))  # the kernels really were sanitized
    assert libraries and any(b"__ubsan_handle" in library.read_bytes() for library in libraries)
