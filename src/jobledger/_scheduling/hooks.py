"""What the scheduling layer plugs into a started manager's lifecycle.

`_runtime/lifecycle.py` calls these at its points (the recovery flow's schedule step, a
pause and its release, leadership changes, another process's commit, the stop); the
base class does nothing, so a lifecycle without schedules needs no special case.
`_scheduling/job_schedules.py` implements them. The dependency runs one way: the runtime
imports this module, and nothing in `_scheduling` imports `_runtime`.
"""

from __future__ import annotations

__all__ = ["ScheduleHooks"]


class ScheduleHooks:
    """What the scheduling layer plugs into the lifecycle (no-ops until it does)."""

    async def catch_up_and_arm(self) -> None:
        return None

    def on_pause(self) -> None:
        return None

    def on_release(self) -> None:
        return None

    async def on_stop(self) -> None:
        return None

    def on_leadership(self, leader: bool) -> None:
        return None

    def follow(self) -> None:
        """Another process committed: schedules may have been added or changed."""
