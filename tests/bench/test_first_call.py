"""bench/first_call.py: stage timers are exclusive (a nested stage's time leaves the outer one's),
off the main thread they time nothing, and the rows print and tabulate (in bench/minilm.py's
report too)."""
from __future__ import annotations

import threading

from bench import first_call
from bench.minilm_report import _first_call_lines


def test_nested_stages_count_once_each_and_other_threads_are_not_timed() -> None:
    ticks = iter([0.0, 1.0, 3.0, 4.0, 10.0, 20.0])  # schedule starts, compile starts and ends, schedule ends
    timers = first_call.StageTimers(clock=lambda: next(ticks))
    inner = timers.wrap("compile", lambda: None)
    timers.wrap("schedule", inner)()
    assert timers.totals["compile"] == 2.0
    assert timers.totals["schedule"] == 2.0, "the nested stage's time is not the outer one's"
    thread = threading.Thread(target=inner)  # timed, it would add 10
    thread.start()
    thread.join()
    assert timers.totals["compile"] == 2.0, "another thread's call is not timed"


def _row(state: str) -> dict[str, object]:
    return {"device": "LLVM", "path": "encoder", "cache": state, "target_s": 0.5, "wall_s": 0.4, "cpu_s": 0.3,
            "main_thread_cpu_s": 0.3, "stages_s": dict.fromkeys(first_call.STAGES, 0.05), "compiles": 0,
            "store_hits": 15}


def test_rows_print_and_tabulate() -> None:
    rows = [_row("empty"), _row("warm"), {"device": "CLANG", "path": "encode", "cache": "warm", "error": "boom"}]
    table = first_call.markdown(rows, {"cpus": 2})
    assert table.count("\n| LLVM | encoder |") == 2 and "| CLANG | encode | warm | boom |" in table
    assert "0.400 s wall, 0.300 s CPU" in first_call.progress(rows[0])
    lines = _first_call_lines([{"first_call": rows[:2]}, {"device": "CLANG"}])
    assert len([line for line in lines if line.startswith("- LLVM")]) == 2
    assert _first_call_lines([{"device": "CLANG"}]) == []
