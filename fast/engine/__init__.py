"""The engine: scheduling lazy graphs into kernels (schedule.py, fusion.py), running them (realize.py)
and reading values back (readback.py)."""
from fast.engine.readback import to_numpy
from fast.engine.realize import realize, run_schedule
from fast.engine.schedule import ScheduleItem, create_schedule, schedule

__all__ = ["ScheduleItem", "create_schedule", "realize", "run_schedule", "schedule", "to_numpy"]
