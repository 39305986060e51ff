"""Former name of ``scheduler.sim.trace_jobs`` (trace rows -> core ``Job``s), kept only as an alias.

Pure; holds no code. The demo (``scheduler.demo.runner``, being moved out of the product package in
parallel) still imports from here; once it imports ``scheduler.sim.trace_jobs``, delete this module.
"""

from __future__ import annotations

from scheduler.sim.trace_jobs import Catalogue, TraceDurationTruth, Workload, WorkloadOptions, build_workload

__all__ = ["Catalogue", "TraceDurationTruth", "Workload", "WorkloadOptions", "build_workload"]
