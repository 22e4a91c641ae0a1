"""The engine: scheduling lazy graphs into kernels (schedule.py, fusion.py) and running them (realize.py)."""
from fast.engine.realize import realize, run_schedule, to_numpy
from fast.engine.schedule import ScheduleItem, create_schedule, schedule

__all__ = ["ScheduleItem", "create_schedule", "realize", "run_schedule", "schedule", "to_numpy"]
