"""Where a bench command writes its results, and whether its devices can run here.

Invariant: a command writes into bench/results/ (committed files the README quotes) only when asked:
`--save`, or an explicit `--out-prefix` or `--out-dir`. Otherwise it writes into a new temporary folder
(`$TMPDIR/fast-bench-XXXX/`), which it prints, so a smoke run never overwrites a committed result.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import RESULTS_DIR


def add_output_options(parser: argparse.ArgumentParser, default_prefix: str) -> None:
    """`--save`, `--out-dir` and `--out-prefix` (None when not given, so `destination` can tell)."""
    parser.add_argument("--save", action="store_true",
                        help=f"write the results into {RESULTS_DIR} (default: a new temporary folder)")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help=f"write the results into this folder (implies saving; default with --save or "
                        f"--out-prefix: {RESULTS_DIR})")
    parser.add_argument("--out-prefix", default=None,
                        help=f"file name stem of the results (implies saving; default {default_prefix}); "
                        "with a folder part (a/b/name) the results go into that folder, relative to "
                        "--out-dir when given, else to the current folder")


def destination(options: argparse.Namespace, default_prefix: str) -> tuple[Path, str]:
    """(folder, file stem) of this run's results: bench/results/ only when saving was asked for (see the
    module docstring), else a fresh temporary folder; a prefix with a folder part names its own folder
    (`--out-prefix`'s help). The folder exists when this returns, before anything is measured."""
    prefix = options.out_prefix or default_prefix
    if options.out_prefix is not None and Path(prefix).name != prefix:
        within = options.out_dir if options.out_dir is not None else Path.cwd()
        folder, prefix = within / Path(prefix).parent, Path(prefix).name
    elif options.out_dir is not None:
        folder = options.out_dir
    elif options.save or options.out_prefix is not None:
        folder = RESULTS_DIR
    else:
        folder = Path(tempfile.mkdtemp(prefix="fast-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder, prefix


def unusable_device(name: str) -> str | None:
    """Why `fast` cannot run compute kernels on device `name` on this machine, or None when it can: an
    unknown name, a DISK device (it holds data only), a runtime that does not open (llvmlite missing for
    LLVM), or a device that opens but cannot run (CUDA without a driver or a GPU)."""
    import fast

    try:
        kind = fast.Device.kind(name)
        if kind == "DISK":
            return f"{name} holds data only and cannot run the workloads' kernels"
        device = fast.Device[name]
        if not getattr(device, "can_run", lambda: True)():
            return f"{name} cannot run kernels on this machine (no CUDA driver or GPU found)"
    except (ImportError, OSError, RuntimeError, ValueError) as error:
        return f"{name} cannot be opened here: {error}"
    return None
