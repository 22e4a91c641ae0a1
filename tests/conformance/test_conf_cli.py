"""`python -m conformance`: progress on stderr, the coverage table and failures on stdout, exit status."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conformance.__main__ import Progress, report
from conformance.runner import Failure, RunResult

ROOT = Path(__file__).resolve().parents[2]


def test_cli_runs_reference_against_itself() -> None:
    command = [sys.executable, "-m", "conformance", "--candidate", "reference", "--examples", "24", "--jobs", "1",
               "--seed", "3", "--time-limit", "60"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "[conformance]" in done.stderr and "programs" in done.stderr
    assert "\r" not in done.stderr  # a pipe gets plain lines, never a bar redrawn in place
    assert "Exercised:" in done.stdout and "op:" in done.stdout and "feature:" in done.stdout
    assert (done.returncode == 0) == ("No disagreements." in done.stdout), done.stdout[-3000:]
    assert done.returncode in (0, 1)


def test_report_prints_each_failure_with_its_snippet() -> None:
    result = RunResult(examples=5, failures={"value:Elementwise.MAX:float32": Failure(
        "value:Elementwise.MAX:float32", "step 3: expected nan, got 1.0", "def program(T): ...", count=4)})
    text = report(result, "header")
    assert "FAILURE 1: value:Elementwise.MAX:float32 (seen 4x)" in text and "def program(T): ..." in text
    assert "Not exercised:" in text


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_in_a_terminal_and_plain_lines_elsewhere() -> None:
    terminal = _Terminal()
    bar = Progress(10, terminal)
    bar(4, 1)
    bar(10, 1)
    bar.close()
    assert bar.bar is not None and "\r" in terminal.getvalue() and "10/10" in terminal.getvalue()
    pipe = io.StringIO()
    lines = Progress(10, pipe, every=0.0)
    lines(4, 1)
    lines(10, 2)
    lines.close()
    text = pipe.getvalue()
    assert "\r" not in text and text.splitlines()[0].startswith("[conformance] 4/10 programs, 1 failing")
    assert text.splitlines()[-1].startswith("[conformance] 10/10 programs, 2 failing") and text.endswith("\n")
    quiet = io.StringIO()
    seldom = Progress(10, quiet, every=3600.0)
    seldom(5, 0)
    seldom.close()
    assert quiet.getvalue().count("\n") == 1  # only the closing line within the hour


def test_each_worker_keeps_its_disk_files_in_a_folder_of_its_own(tmp_path: Any) -> None:
    """Two workers that draw the same DISK file name must not write one file (runner.py
    `worker_disk_dir`): each gets a folder of its own under the run's; no DISK, no folder."""
    from conformance.profiles import GenConfig
    from conformance.runner import worker_disk_dir

    cfg = GenConfig(disk_dir=str(tmp_path))
    first, second = worker_disk_dir(cfg, 0), worker_disk_dir(cfg, 1)
    assert first.disk_dir != second.disk_dir
    for worker in (first, second):
        assert worker.disk_dir is not None and os.path.isdir(worker.disk_dir)
        assert os.path.dirname(worker.disk_dir) == str(tmp_path)
    assert worker_disk_dir(GenConfig(), 0).disk_dir is None
