"""Fault points: named moments inside a batch at which a test makes a job die, so a crash lands where it matters.

A random kill mostly lands between batches, where nothing is at stake. The moments that test exactly-once are
inside a batch: before its writes, between a table job's two writes (its side rows sent to Kafka, the table not
yet merged) and after its writes (everything written, the checkpoint not yet told: the restarted job runs the
same batch id again). The runtime passes each of them in every batch; a test arms one for a process with

    KAPPA_TEST_KILL_AT=<point>:<n>[@<query>]      e.g. KAPPA_TEST_KILL_AT=between-writes:2@page_stats_v1

and the process sends itself SIGKILL the n-th time one of its batches reaches that point (1: the first), after
one line on stderr that says where. Between writes counts only batches with table rows to write: a batch of dead
letters alone has no second write to come. Unarmed (always, outside the tests), a point costs one comparison. A
process that runs several jobs (a job host) counts the batches of the query named after `@` only, and its death
is every job's: the others die wherever they are, as they would with the machine.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache

from kappa.core.errors import KappaError

KILL_AT = "KAPPA_TEST_KILL_AT"


class FaultPoint(StrEnum):
    BEFORE_WRITES = "before-writes"  # the batch is planned and checked; nothing of it is written
    BETWEEN_WRITES = "between-writes"  # a table job: its side rows are in Kafka, its table is not written yet
    AFTER_WRITES = "after-writes"  # every write done; Spark has not recorded the batch in the checkpoint


@dataclass
class FaultPlan:
    """Where this process dies, if anywhere: the `batch`-th time a batch (of the query `query`, if named) reaches
    `point`."""

    point: FaultPoint | None = None
    batch: int = 0
    query: str | None = None
    _seen: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_environment(cls) -> FaultPlan:
        armed = os.environ.get(KILL_AT, "").strip()
        if not armed:
            return cls()
        where, _, query = armed.partition("@")
        point, _, number = where.partition(":")
        try:
            return cls(FaultPoint(point), int(number or "1"), query.strip() or None)
        except ValueError:
            choices = ", ".join(p.value for p in FaultPoint)
            raise KappaError(f"{KILL_AT}={armed}: expected <point>:<n>[@<query>], a point among {choices}") from None

    def reached(
        self,
        point: FaultPoint,
        query: str,
        batch_id: int,
        detail: Callable[[], str] | None = None,
        counts: Callable[[], bool] | None = None,
    ) -> None:
        """A batch of `query` reached `point`: die here if it is the plan's point (and query, if it names one) and
        the n-th time a batch reached it in this process (`counts`, asked only then, says whether this batch
        counts; `detail` says what the batch had done)."""
        if point is not self.point or self.query not in (None, query) or (counts is not None and not counts()):
            return
        with self._lock:
            self._seen += 1
            if self._seen != self.batch:
                return
        said = f": {detail()}" if detail else ""
        sys.stderr.write(f"fault point: SIGKILL at {point} of {query} batch {batch_id} (#{self.batch} here){said}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


@cache
def process_faults() -> FaultPlan:
    """This process's plan, read from the environment once: batches are counted across its queries' restarts."""
    return FaultPlan.from_environment()
