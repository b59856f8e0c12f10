"""The live version of each dataset a job version of this process writes, for the metrics (kappa.runtime.metrics):
the alias registry read in the background, so that a scrape never waits for Kafka."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from confluent_kafka import KafkaException
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import Alias, AliasWatch

log = logging.getLogger("kappa.metrics")


ALIASES_REFRESH_S = 10.0  # how often a process reads kafka.aliases for the live versions it exports


class LiveVersions(Collector):
    """The live version of each dataset a job version of this process writes, by the alias registry: read in the
    background every ALIASES_REFRESH_S by one open reader per Kafka (one offsets request while nothing moves), so
    that a scrape never waits for Kafka; said as of the last read that succeeded. A cutover or a rollback is a
    change of the dataset's series (PromQL `changes()` counts them)."""

    def __init__(self, job_labels: tuple[str, ...]) -> None:
        self._job_labels = job_labels  # the labels of a job version's series
        self._lock = threading.Lock()
        self._writers: dict[tuple[str, str], tuple[KappaSettings, str]] = {}  # (job, version) -> where, dataset
        self._aliases: dict[str, Alias] = {}  # dataset -> its alias, as last read
        self._reader: threading.Thread | None = None

    def watch(self, job: str, version: str, settings: KappaSettings, dataset: str) -> None:
        with self._lock:
            self._writers[(job, version)] = (settings, dataset)
            if self._reader is None:
                self._reader = threading.Thread(target=self._read_forever, name="kappa-metrics-aliases", daemon=True)
                self._reader.start()

    def forget(self, job: str, version: str) -> None:
        with self._lock:
            self._writers.pop((job, version), None)

    def _read_forever(self) -> None:
        watches: dict[str, AliasWatch] = {}
        while True:
            with self._lock:
                places = {settings.bootstrap: settings for settings, _dataset in self._writers.values()}
            for bootstrap, settings in places.items():
                try:
                    watch = watches.get(bootstrap) or watches.setdefault(bootstrap, AliasWatch(settings))
                    aliases = watch.all()
                except (KappaError, KafkaException) as exc:  # the lag says Kafka is gone; the last read stands
                    log.debug("could not read the aliases at %s: %s", bootstrap, exc)
                    continue
                with self._lock:
                    self._aliases.update(aliases)
            time.sleep(ALIASES_REFRESH_S)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        live = GaugeMetricFamily(
            "kappa_dataset_live_version",
            "The version the dataset's alias points at (readers read it)",
            labels=["dataset"],
        )
        moved = GaugeMetricFamily(
            "kappa_dataset_alias_moved_timestamp_seconds",
            "When the dataset's alias last moved: its first version, a cutover, a rollback (Unix time)",
            labels=["dataset"],
        )
        serving = GaugeMetricFamily(
            "kappa_job_live",
            "1 when the job version is its dataset's live version (readers read it), else 0",
            labels=list(self._job_labels),
        )
        with self._lock:
            for dataset in sorted({dataset for _settings, dataset in self._writers.values()}):
                alias = self._aliases.get(dataset)
                if alias is not None:
                    live.add_metric([dataset], alias.version)
                    moved.add_metric([dataset], alias.changed_at / 1000)
            for (job, version), (_settings, dataset) in sorted(self._writers.items()):
                alias = self._aliases.get(dataset)
                serving.add_metric([job, version], int(alias is not None and str(alias.version) == version))
        yield from (live, moved, serving)
