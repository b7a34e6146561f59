"""Run the warmer on a timer outside Lambda (the local stack: ``warmstart local up``).

:class:`WarmerSchedule` satisfies the local stack's ``Service`` protocol (``name``, ``endpoint``,
``start()``, ``stop()``) without importing it: a daemon thread calls
:func:`warmers.runner.run_once` every ``period_s`` seconds of the given clock (the emulator's
scaled clock during replays), like EventBridge Scheduler's ``rate(1 minute)`` in AWS.
"""

from __future__ import annotations

import json
import logging
import threading

from warmers.config import WarmerConfig
from warmers.plan.policy import WarmPlan
from warmers.ports import EpochClock
from warmers.runner import WarmerClients, WarmerRuntime, run_once

logger = logging.getLogger("warmstart.warmer")


class WarmerSchedule:
    """Calls ``run_once`` at start and then every ``period_s`` of ``clock_time``.

    Parameters
    ----------
    config : WarmerConfig
    clients : WarmerClients
        boto3 clients pointed at the moto server (CloudWatch, SSM, Application Auto Scaling)
        and the emulator (Lambda), see ``WarmerClients.from_boto3``.
    clock_time : callable
        Epoch seconds of the stack's clock (scaled during replays).
    period_s : float
        Clock seconds between runs (60: the production schedule).
    poll_s : float
        Real seconds between checks of the clock (and of ``stop()``).
    """

    name = "warmer"

    def __init__(self, config: WarmerConfig, clients: WarmerClients, *,
                 clock_time: EpochClock, period_s: float = 60.0,
                 poll_s: float = 0.05) -> None:
        if period_s <= 0 or poll_s <= 0:
            raise ValueError("period_s and poll_s must be > 0")
        self._config = config
        self._runtime = WarmerRuntime.build(clients, config)
        # the local agents' EMF (Requests by path) goes to their logs, never to the moto
        # server's CloudWatch: the overflow answers are unknown here, so the endpoint's spend
        # guard is not applied (its plan step says so) rather than reading 0 answers
        self._runtime.answers = None
        self._time = clock_time
        self._period_s = period_s
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0
        self.errors = 0
        self.last_plans: list[WarmPlan] = []

    @property
    def endpoint(self) -> str:
        return f"schedule:rate({self._period_s:g} s)"

    def run_now(self) -> list[WarmPlan]:
        """One run at the clock's current time (also used by the thread)."""
        plans = run_once(self._time(), None, self._config, runtime=self._runtime)
        self.runs += 1
        self.last_plans = plans
        return plans

    def _loop(self) -> None:
        next_at = self._time()
        while not self._stop.is_set():
            if self._time() >= next_at:
                next_at += self._period_s
                try:
                    self.run_now()
                except Exception as exc:  # noqa: BLE001 - a failed run must not end the schedule
                    self.errors += 1
                    logger.error(json.dumps({"tag": "tool_unavailable", "source": "warmer",
                                             "message": f"warmer run failed: {exc!r}"}))
            self._stop.wait(self._poll_s)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("WarmerSchedule already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="warmstart-warmer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
