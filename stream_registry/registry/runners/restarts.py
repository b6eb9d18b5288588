"""What a stream process's exit leads to: one rule for a stream's single process (registry) and for each task of a
stream with several (task_runner), so a crash loop, the restart policy and a stopping host are judged alike."""
from __future__ import annotations

from dataclasses import dataclass

from ...config import RestartPolicy
from ...model import ExitOutcome


@dataclass(frozen=True)
class RestartBackoff:
    """When a stream whose process died is started again: capped exponential backoff.

    A process that ran `reset_after_s` before dying starts the backoff over, so
    a crash a day is restarted at once and a crash loop is slowed down.
    """
    first_s: float = 1.0
    max_s: float = 60.0
    reset_after_s: float = 60.0

    def delay(self, failures: int) -> float:
        return min(self.first_s * (2 ** (failures - 1)), self.max_s)

    def after_exit(self, cause: str, policy: RestartPolicy, *, failures: int, ran_s: float, restarts: int,
                   host_stopping: bool) -> ExitOutcome:
        """The error to show, the delay before a restart (None: no restart) and the failures now counted, for a
        process that died of `cause` after running `ran_s`. A stopping host restarts nothing."""
        if host_stopping:
            return ExitOutcome(error=f"stream process {cause}; not restarted: the host is stopping", delay_s=None,
                               failures=failures)
        if policy == RestartPolicy.NEVER:
            return ExitOutcome(error=f"stream process {cause}; not restarted (restart: never)", delay_s=None,
                               failures=failures)
        failures = 1 if ran_s >= self.reset_after_s else failures + 1
        delay = self.delay(failures)
        return ExitOutcome(error=f"stream process {cause}; restarting in {delay:g} s (restart {restarts + 1})",
                           delay_s=delay, failures=failures)


DEFAULT_RESTART_BACKOFF = RestartBackoff()
