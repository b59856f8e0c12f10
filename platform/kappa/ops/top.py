"""`kappa top`: the running job versions live, as `top` shows processes: rate, lag, p99 batch time, last batch,
restarts, and sparklines of rate and lag over the last samples.

It reads what the runs publish, nothing else: each run record (`<job>.v<N>.run.json`, written by `kappa jobs run`,
a deployment's driver or the job host) names the process's metrics address (kappa.runtime.metrics), and each
address is scraped once per sample (the job host's jobs share one). Rates and the p99 come from the difference
between two samples of a counter or of the batch-duration histogram's buckets, as Prometheus' `rate()` and
`histogram_quantile()` compute them.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.runtime import run_record
from kappa.runtime.metrics import BATCH_DURATION, INPUT_RECORDS, LAG_NAME, LAST_BATCH, RESTARTS, RUNNING
from kappa.runtime.run_record import RunRecord, RunState

HISTORY = 30  # samples kept per job version: the sparklines' width
SPARKS = "▁▂▃▄▅▆▇█"
_LIVE = (RunState.STARTING, RunState.RUNNING, RunState.RETRYING)


def _name(metric: object, suffix: str = "") -> str:
    return str(metric.describe()[0].name) + suffix  # type: ignore[attr-defined]


_RECORDS, _LAG = _name(INPUT_RECORDS, "_total"), LAG_NAME
_BUCKET, _LAST, _RESTARTS, _RUNNING = (
    _name(BATCH_DURATION, "_bucket"), _name(LAST_BATCH), _name(RESTARTS, "_total"), _name(RUNNING)
)  # fmt: skip


@dataclass(frozen=True)
class Sample:
    """One scrape of one job version's series."""

    at: float  # seconds on any clock (the same for the samples compared)
    records: float
    lag: float | None  # over its input topics; None before its first batch
    buckets: dict[float, float]  # batch durations: upper bound (s) -> batches at or below it, since the start
    last_batch: float | None  # Unix time
    restarts: float
    running: bool


def sample_of(text: str, job: str, version: int, at: float) -> Sample | None:
    """The version's sample in a scrape (the exposition text), None when the process serves no series of it."""
    wanted = {"job": job, "version": str(version)}
    records, restarts, lag = 0.0, 0.0, None
    buckets: dict[float, float] = {}
    last, running, seen = None, False, False
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if {k: s.labels.get(k) for k in wanted} != wanted:
                continue
            seen = True
            if s.name == _RECORDS:
                records = s.value
            elif s.name == _LAG:
                lag = (lag or 0.0) + s.value
            elif s.name == _BUCKET:
                buckets[float(s.labels["le"])] = s.value
            elif s.name == _LAST:
                last = s.value
            elif s.name == _RESTARTS:
                restarts += s.value
            elif s.name == _RUNNING:
                running = s.value == 1
    if not seen:
        return None
    return Sample(at, records, lag, buckets, last, restarts, running)


def rate(older: Sample, newer: Sample) -> float:
    """Records read per second between two samples (0 across a restart of the process: its counters reset)."""
    seconds = newer.at - older.at
    read = newer.records - older.records
    return read / seconds if seconds > 0 and read >= 0 else 0.0


def quantile(older: Sample, newer: Sample, q: float = 0.99) -> float | None:
    """The q-quantile of the batch durations between two samples, as the upper bound of the bucket it falls in
    (Prometheus' histogram_quantile interpolates within it; the bound is what the data supports); None when no
    batch completed in between."""
    bounds = sorted(newer.buckets)
    deltas = [newer.buckets[b] - older.buckets.get(b, 0.0) for b in bounds]
    if not deltas or deltas[-1] <= 0:
        return None
    for bound, count in zip(bounds, deltas, strict=True):
        if count >= q * deltas[-1]:
            return bound
    return math.inf


def sparkline(values: Sequence[float], width: int = HISTORY) -> str:
    """The last `width` values as block characters, scaled from 0 to their maximum."""
    shown = list(values)[-width:]
    top = max(shown, default=0.0)
    if top <= 0:
        return SPARKS[0] * len(shown)
    return "".join(SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))] for v in shown)


@dataclass
class Top:
    """The running versions' samples over time; `poll` adds one per version."""

    settings: KappaSettings
    history: dict[tuple[str, int], deque[Sample]] = field(default_factory=dict)
    records: dict[tuple[str, int], RunRecord] = field(default_factory=dict)
    unreachable: dict[tuple[str, int], str] = field(default_factory=dict)

    def live_runs(self) -> list[RunRecord]:
        found = []
        for path in sorted(self.settings.deployments_path.glob(f"*{run_record.SUFFIX}")):
            try:
                record = run_record.read(path)
            except KappaError:
                continue  # being rewritten, or broken: the next sample reads it again
            if record is not None and record.state in _LIVE:
                found.append(record)
        return found

    def poll(self) -> None:
        now = time.monotonic()
        runs = self.live_runs()
        self.records = {(r.job, r.version): r for r in runs}
        self.unreachable = {}
        scraped: dict[str, str | None] = {}  # address -> exposition text (None: no answer)
        for run in runs:
            key = (run.job, run.version)
            url = run.metrics_url
            if url is None:
                self.unreachable[key] = "no metrics address in its run record (metrics off, or still starting)"
                continue
            if url not in scraped:
                try:
                    scraped[url] = httpx.get(url, timeout=2).text
                except httpx.HTTPError as exc:
                    scraped[url] = None
                    self.unreachable[key] = f"{url} does not answer ({exc})"
            text = scraped[url]
            sample = None if text is None else sample_of(text, run.job, run.version, now)
            if sample is not None:
                self.history.setdefault(key, deque(maxlen=HISTORY + 1)).append(sample)
        for gone in set(self.history) - set(self.records):
            del self.history[gone]

    def rows(self, wall_now: float | None = None) -> list[tuple[str, ...]]:
        """One row per live version: job, version, state, records/s, lag, p99 batch, last batch, restarts, and
        sparklines of rate and lag."""
        wall_now = time.time() if wall_now is None else wall_now
        rows: list[tuple[str, ...]] = []
        for key, run in sorted(self.records.items()):
            samples = list(self.history.get(key, ()))
            rates = [rate(a, b) for a, b in itertools.pairwise(samples)]
            lags = [s.lag or 0.0 for s in samples[1:]]
            last = samples[-1] if samples else None
            p99 = quantile(samples[0], samples[-1]) if len(samples) > 1 else None
            rows.append((
                run.job,
                str(run.version),
                run.state.value,
                f"{rates[-1]:,.0f}" if rates else "-",
                "-" if last is None or last.lag is None else f"{last.lag:,.0f}",
                "-" if p99 is None else ("> 300 s" if math.isinf(p99) else f"≤ {p99:g} s"),
                "-" if last is None or last.last_batch is None else f"{wall_now - last.last_batch:.0f} s ago",
                "-" if last is None else f"{last.restarts:.0f}",
                sparkline(rates),
                sparkline(lags),
            ))  # fmt: skip
        return rows
