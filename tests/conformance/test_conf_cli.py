"""`python -m conformance`: progress on stderr, the coverage table and failures on stdout, exit status."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conformance.__main__ import report
from conformance.runner import Failure, RunResult

ROOT = Path(__file__).resolve().parents[2]


def test_cli_runs_reference_against_itself() -> None:
    command = [sys.executable, "-m", "conformance", "--candidate", "reference", "--examples", "24", "--jobs", "1",
               "--seed", "3", "--time-limit", "60"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "programs" in done.stderr and "[" in done.stderr
    assert "Exercised:" in done.stdout and "op:" in done.stdout and "feature:" in done.stdout
    assert (done.returncode == 0) == ("No disagreements." in done.stdout), done.stdout[-3000:]
    assert done.returncode in (0, 1)


def test_report_prints_each_failure_with_its_snippet() -> None:
    result = RunResult(examples=5, failures={"value:Elementwise.MAX:float32": Failure(
        "value:Elementwise.MAX:float32", "step 3: expected nan, got 1.0", "def program(T): ...", count=4)})
    text = report(result, "header")
    assert "FAILURE 1: value:Elementwise.MAX:float32 (seen 4x)" in text and "def program(T): ..." in text
    assert "Not exercised:" in text
