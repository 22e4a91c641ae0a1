"""Compiling the bench's C probes (the read ceiling, the FMA peak, the AMX tile peak) into shared
libraries with the C compiler on PATH (CC, else cc, gcc or clang)."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess


def build_probe(directory: str, name: str, source: str, flags: list[str]) -> ctypes.CDLL:
    """`source` compiled with -O2, `flags`, -shared -fPIC -pthread into `directory`, loaded
    (RuntimeError naming the compiler's message when it fails, or when there is no compiler)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    source_path, library = os.path.join(directory, f"{name}.c"), os.path.join(directory, f"{name}.so")
    with open(source_path, "w", encoding="utf-8") as handle:
        handle.write(source)
    command = [compiler, "-O2", *flags, "-shared", "-fPIC", "-pthread", source_path, "-o", library]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[:400]}")
    return ctypes.CDLL(library)
