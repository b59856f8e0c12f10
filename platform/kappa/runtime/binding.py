"""From a job's declaration to what one version of it reads and writes on the cluster.

A job declares datasets (`enriched_clicks`); a running version writes its own physical output
(`enriched_clicks.v2`, or `<delta_root>/page_stats/v2`) and reads each derived input at the version its alias
points to (a job's output read by another job), or, before any alias exists, at the version its writer
declares. Source topics are read as they are. Nothing else names physical topics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from kappa.contracts.topic_declarations import Topic, dead_letters_of, late_events_of
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import DELTA_KIND, TOPIC_KIND, Alias, AliasRegistry
from kappa.runtime.declaration import DeltaTable, JobSpec
from kappa.runtime.discovery import discover, get_job


def table_dataset(table: str) -> str:
    """A Delta table's name in the alias registry: `delta:<table>` (a table and a topic may share a name)."""
    return f"delta:{table}"


def dataset_of(job: JobSpec) -> str:
    """The alias name of what a job writes: the topic's dataset (also for a job bound to its versioned
    topic), or `delta:<table>`."""
    return job.output.dataset_name if isinstance(job.output, Topic) else table_dataset(job.output.name)


def writers(jobs: Mapping[str, JobSpec]) -> dict[str, JobSpec]:
    """Topic dataset -> the job that writes it (a Delta table is no job's input)."""
    return {job.output.name: job for job in jobs.values() if isinstance(job.output, Topic)}


def input_versions(job: JobSpec, jobs: Mapping[str, JobSpec], aliases: Mapping[str, Alias]) -> dict[str, int]:
    """Derived input dataset -> the version this job reads: the live alias, else the writer's declared version."""
    by_dataset = writers(jobs)
    versions = {}
    for topic in (*job.inputs, *job.lookups):
        writer = by_dataset.get(topic.name)
        if writer is None:
            continue  # a source topic: one physical topic, no versions
        alias = aliases.get(topic.name)
        versions[topic.name] = alias.version if alias else writer.version
    return versions


def bind(job: JobSpec, version: int, jobs: Mapping[str, JobSpec], aliases: Mapping[str, Alias]) -> JobSpec:
    """The job as `version` runs it: its versioned output topic, each derived input at its live version.
    Each physical topic keeps its dataset, so its schema subject is the dataset's."""
    inputs = input_versions(job, jobs, aliases)
    output = job.output.versioned(version) if isinstance(job.output, Topic) else job.output
    return replace(
        job,
        inputs=tuple(t.versioned(inputs[t.name]) if t.name in inputs else t for t in job.inputs),
        lookups=tuple(t.versioned(inputs[t.name]) if t.name in inputs else t for t in job.lookups),
        output=output,
    )


def physical_output(job: JobSpec, settings: KappaSettings, version: int) -> tuple[str, str]:
    """(kind, topic name or Delta path) of one version's output."""
    if isinstance(job.output, DeltaTable):
        return DELTA_KIND, job.output.path(settings, version)
    return TOPIC_KIND, job.output.versioned(version).name


def deployment_topics(bound: JobSpec) -> list[Topic]:
    """The topics a bound job version writes: its output and `.late` side topic, its inputs' dead letters."""
    topics = [dead_letters_of(t) for t in bound.inputs]
    if isinstance(bound.output, Topic):
        topics = [bound.output, late_events_of(bound.output), *topics]
    return topics


def cluster_topics(catalog: Iterable[Topic], jobs: Mapping[str, JobSpec], aliases: Mapping[str, Alias]) -> list[Topic]:
    """What `kappa topics apply` makes exist: the catalog's topics that no job writes (sources, their dead
    letters, the control topics), and the physical topics of each job's declared and live versions."""
    written = set(writers(jobs))
    wanted: dict[str, Topic] = {t.name: t for t in catalog if t.name not in written}
    for job in jobs.values():
        live = aliases.get(dataset_of(job))
        for version in sorted({job.version, *([live.version] if live else [])}):
            for topic in deployment_topics(bind(job, version, jobs, aliases)):
                wanted.setdefault(topic.name, topic)
    return list(wanted.values())


def deployed_job(settings: KappaSettings, name: str, version: int | None = None) -> JobSpec:
    """The discovered job `name`, bound for `version` (default: its declared one) against the live aliases."""

    job = declared_job(name, version)
    return bind(job, job.version, discover(), AliasRegistry(settings).all())


def declared_job(name: str, version: int | None = None) -> JobSpec:
    """The discovered job `name`, if this code declares `version` (default: the declared one)."""

    job = get_job(name)
    if version is not None and version != job.version:
        raise KappaError(
            f"jobs/{name} declares v{job.version}: running that code as v{version} would write v{job.version}'s "
            f"logic into v{version}'s output. Run v{version} from the code that declares it."
        )
    return job


def topics_to_apply(settings: KappaSettings, catalog: Iterable[Topic]) -> list[Topic]:
    """`cluster_topics` for the discovered jobs and the live aliases (none yet on a fresh cluster)."""

    return cluster_topics(catalog, discover(), AliasRegistry(settings).all())


def ensure_live(settings: KappaSettings, job: JobSpec, version: int) -> Alias | None:
    """A dataset with no live version gets one: the first version of its job that runs. Later versions go
    live only by a cutover. Returns the alias it set, None if the dataset already had one."""

    registry = AliasRegistry(settings)
    dataset = dataset_of(job)
    if registry.live(dataset) is not None:
        return None
    try:
        alias = point_alias(settings, registry, job, version, expected=None, reason="first deployment")
    except KappaError:
        if registry.live(dataset) is not None:
            return None  # another first run won the race: that one is live
        raise
    registry.record(job.name, "deploy", to_version=version, from_version=None, details={"physical": alias.physical})
    return alias


def point_alias(
    settings: KappaSettings,
    registry: AliasRegistry,
    job: JobSpec,
    version: int,
    *,
    expected: int | None,
    reason: str,
    by: str | None = None,
) -> Alias:
    """Move the alias of what `job` writes to `version`, if it still points at `expected` (kappa.aliases)."""
    kind, physical = physical_output(job, settings, version)
    return registry.move(
        dataset_of(job),
        job=job.name,
        kind=kind,
        version=version,
        physical=physical,
        expected_version=expected,
        reason=reason,
        by=by,
    )
