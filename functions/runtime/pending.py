"""Invocation records held until Powertools is loaded (a cold request does not import it).

While the toolkit's telemetry stage (Powertools' logger and metrics) is still loading on the
preload thread, a finished request's record waits here; the stage flushes them once it is
loaded, and so does any later request (a record added while the stage was flushing is not
lost).

Imports only the standard library (and the toolkit).
"""

from __future__ import annotations

import threading
from typing import Any

from functions.runtime.telemetry import InvocationRecord, Telemetry

__all__ = ["PendingRecords"]


class PendingRecords:
    """Records of one execution environment waiting for ``telemetry`` to load.

    Attributes
    ----------
    records : list[tuple[InvocationRecord, dict[str, Any]]]
        Each record with its ``Telemetry.request_done`` (or ``stream_done``, when it has a
        ``stream`` key) keywords; empty on the warm path.
    """

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        self.records: list[tuple[InvocationRecord, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def add(self, record: InvocationRecord, done: dict[str, Any]) -> None:
        """Hold ``record`` (``done``: its keywords) until :meth:`flush`."""
        with self.lock:
            self.records.append((record, done))

    def flush(self) -> int:
        """Log and count every held record; returns how many."""
        with self.lock:
            pending, self.records = self.records, []
        for record, done in pending:
            if "stream" in done:  # a streamed answer (`functions.runtime.admission.stream`)
                self.telemetry.stream_done(record, **done)
            else:
                self.telemetry.request_done(record, **done)
        return len(pending)
