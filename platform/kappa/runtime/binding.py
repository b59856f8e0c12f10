"""From a job's declaration to what one version of it reads and writes on the cluster.

A job declares datasets (`enriched_clicks`); a running version writes its own physical output
(`enriched_clicks.v2`, or `<delta_root>/page_stats/v2`) and reads each derived input at the version its alias
points to (a job's output read by another job), or, before any alias exists, at the version its writer
declares. Source topics are read as they are. Nothing else names physical topics.

What a version reads is part of what it is: its first run (or the replay that prepares it) records the code
it runs (its job's declared version) and the version of each derived input (`binding.json` beside its
checkpoints), and every later run binds those inputs again, whatever the aliases say then. So `sessionize` v2
of a cascade replay is v1's code reading `enriched_clicks.v2`, and an old version kept running for a rollback
restarts on the inputs it was built from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from kappa.contracts.topic_declarations import Topic, dead_letters_of
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import Alias, AliasRegistry
from kappa.runtime.declaration import JobSpec, job_checkpoints, version_checkpoints
from kappa.runtime.discovery import discover, get_job
from kappa.runtime.outputs import output_of


def dataset_of(job: JobSpec) -> str:
    """The alias name of what a job writes (`Output.dataset`): the topic's dataset (also for a job bound to its
    versioned topic), or `delta:<table>`."""
    return output_of(job.output).dataset


def writers(jobs: Mapping[str, JobSpec]) -> dict[str, JobSpec]:
    """Topic dataset -> the job that writes it (only a topic is a job's input)."""
    return {topic.name: job for job in jobs.values() if (topic := output_of(job.output).topic) is not None}


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
    """The job as `version` runs it: its versioned output topic, each derived input at its live version."""
    return bind_inputs(job, version, input_versions(job, jobs, aliases))


def bind_inputs(job: JobSpec, version: int, inputs: Mapping[str, int]) -> JobSpec:
    """The job as `version` runs it: its versioned output topic, each derived input at the version `inputs`
    names. Each physical topic keeps its dataset, so its schema subject is the dataset's."""
    return replace(
        job,
        inputs=tuple(t.versioned(inputs[t.name]) if t.name in inputs else t for t in job.inputs),
        lookups=tuple(t.versioned(inputs[t.name]) if t.name in inputs else t for t in job.lookups),
        output=output_of(job.output).versioned(version),
    )


BINDING_FILE = "binding.json"
RUN, REPLAY = "run", "replay"  # what made a version: its first run, or a replay (which never makes it live)


@dataclass(frozen=True)
class VersionBinding:
    """What a version of a job is: the code it runs and the versions of the datasets it reads."""

    code_version: int  # the job's declared version when it was made: the logic it runs
    inputs: dict[str, int] = field(default_factory=dict)  # derived input dataset -> the version it reads
    origin: str = RUN
    # The physical topics it reads as inputs (what its lag is measured on), known without the code that declares
    # it: an old version kept running for a rollback. They follow from the code and `inputs`: not compared.
    reads: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, bound: JobSpec, code_version: int, origin: str = RUN) -> VersionBinding:
        """What a bound job version is: `code_version`'s logic on the inputs it is bound to."""
        return cls(code_version, bound_versions(bound), origin, tuple(t.name for t in bound.inputs))


def _binding_file(settings: KappaSettings, job: str, version: int) -> Path | None:
    root = version_checkpoints(settings, job, version)
    return None if "://" in root else Path(root.removeprefix("file:"), BINDING_FILE)  # s3a: Spark's to read


def recorded_binding(settings: KappaSettings, job: str, version: int) -> VersionBinding | None:
    path = _binding_file(settings, job, version)
    if path is None or not path.is_file():
        return None
    try:
        recorded = json.loads(path.read_text())
        reads = tuple(str(t) for t in recorded.get("reads", ()))  # none in a binding older than the field
        return VersionBinding(int(recorded["code_version"]), dict(recorded["inputs"]), str(recorded["origin"]), reads)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KappaError(f"{path} is unreadable ({exc}): it records what {job} v{version} reads") from None


def record_binding(settings: KappaSettings, job: str, version: int, binding: VersionBinding) -> VersionBinding:
    """Record what the version is, once: a version already recorded keeps its binding (returned)."""
    recorded = recorded_binding(settings, job, version)
    if recorded is not None:
        return recorded
    path = _binding_file(settings, job, version)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(binding), sort_keys=True) + "\n")
        temporary.replace(path)  # whole or absent: a reader never sees half of it
    return binding


def describe_inputs(inputs: Mapping[str, int]) -> str:
    return ", ".join(f"{d} v{v}" for d, v in sorted(inputs.items())) or "sources only"


def known_versions(settings: KappaSettings, job: str) -> list[int]:
    """The versions of the job that have a folder of checkpoints here (made by a run or a replay's prepare)."""
    root = job_checkpoints(settings, job)
    if "://" in root or not Path(root.removeprefix("file:")).is_dir():
        return []
    found = [p.name.removeprefix("v") for p in Path(root.removeprefix("file:")).iterdir() if p.is_dir()]
    return sorted(int(v) for v in found if v.isdigit())


def next_version(settings: KappaSettings, job: JobSpec) -> int:
    """The first version number no version of the job has used: above the declared one, the live one and any
    made here (a retired version's number is not reused: the audit trail names it)."""
    registry = AliasRegistry(settings)
    live = registry.live(dataset_of(job))
    used = [job.version, *([live.version] if live else []), *known_versions(settings, job.name)]
    # The audit names the versions made and retired since: those a replay prepared or a first run deployed (a
    # refused step names a version that may never be made). A job's steps on another dataset (a copy of the
    # pipeline on the same cluster) number another dataset's versions.
    used += [
        s.to_version
        for s in registry.steps(job.name)
        if s.step in ("prepare", "deploy")
        and s.outcome == "ok"
        and s.facts.get("dataset", dataset_of(job)) == dataset_of(job)
    ]
    return max(used) + 1


def bound_versions(bound: JobSpec) -> dict[str, int]:
    """Derived input dataset -> version, read back from a bound job's physical input topics."""
    versions = {}
    for topic in (*bound.inputs, *bound.lookups):
        if topic.dataset and topic.name.startswith(f"{topic.dataset}.v"):
            versions[topic.dataset] = int(topic.name.removeprefix(f"{topic.dataset}.v"))
    return versions


def physical_output(job: JobSpec, settings: KappaSettings, version: int) -> tuple[str, str]:
    """(kind in the alias registry, topic name or Delta path) of one version's output."""
    output = output_of(job.output)
    return output.alias_kind, output.location(settings, version)


def deployment_topics(bound: JobSpec, version: int) -> list[Topic]:
    """The topics a job version writes (`bound` to it): its output and `.late` side topic, its inputs' dead
    letters."""
    return [*output_of(bound.output).topics(version), *(dead_letters_of(t) for t in bound.inputs)]


def cluster_topics(catalog: Iterable[Topic], jobs: Mapping[str, JobSpec], aliases: Mapping[str, Alias]) -> list[Topic]:
    """What `kappa topics apply` makes exist: the catalog's topics that no job writes (sources, their dead
    letters, the control topics), and the physical topics of each job's declared and live versions."""
    written = set(writers(jobs))
    wanted: dict[str, Topic] = {t.name: t for t in catalog if t.name not in written}
    for job in jobs.values():
        live = aliases.get(dataset_of(job))
        for version in sorted({job.version, *([live.version] if live else [])}):
            for topic in deployment_topics(bind(job, version, jobs, aliases), version):
                wanted.setdefault(topic.name, topic)
    return list(wanted.values())


def deployed_job(settings: KappaSettings, name: str, version: int | None = None, *, run: bool = False) -> JobSpec:
    """The discovered job `name`, bound for `version` (default: its declared one): on the inputs its binding
    records, else (a version that never ran) on the live aliases. With `run`, a restart that would keep a live
    version on inputs that have moved since is refused, with the replay that moves it."""

    job = get_job(name)
    version = job.version if version is None else version
    recorded = recorded_binding(settings, name, version)
    if recorded is None:
        declared_job(name, version)  # a version that never ran is the declared one
        return bind(job, version, discover(), AliasRegistry(settings).all())
    if recorded.code_version != job.version:
        raise KappaError(
            f"{name} v{version} runs the code of v{recorded.code_version}, but jobs/{name} declares "
            f"v{job.version} now: run it from the code that declares v{recorded.code_version}, or replay the "
            f"change as a new version (`kappa replay start {name}`)"
        )
    if run:
        refuse_moved_inputs(settings, job, version, recorded, AliasRegistry(settings).all())
    return bind_inputs(job, version, recorded.inputs)


def read_topics(settings: KappaSettings, name: str, version: int) -> list[str]:
    """The physical topics a version of a job reads as inputs: as its binding records them, else as this code
    binds the version. A KappaError when neither knows (a version this code does not declare, recorded before
    bindings named their topics), never an empty answer: a lag measured on no topic would read as caught up."""
    recorded = recorded_binding(settings, name, version)
    if recorded is not None and recorded.reads:
        return list(recorded.reads)
    return [t.name for t in deployed_job(settings, name, version).inputs]


def refuse_moved_inputs(
    settings: KappaSettings, job: JobSpec, version: int, recorded: VersionBinding, aliases: Mapping[str, Alias]
) -> None:
    """A live version reads the live versions of its inputs; once one has moved, restarting it would go on
    serving what the old input computes under the dataset's live name. Its replay onto the new input does not."""
    live = aliases.get(dataset_of(job))
    if live is None or live.version != version:
        return  # not live: an old version kept for a rollback, or a replay's new one, reads what it was built on
    moved = {d: v for d, v in recorded.inputs.items() if d in aliases and aliases[d].version != v}
    if moved:
        what = ", ".join(f"{d} v{v} (live: v{aliases[d].version})" for d, v in sorted(moved.items()))
        raise KappaError(
            f"{job.name} v{version} is live and reads {what}: its checkpoint cannot follow the moved input, and "
            f"restarting it on the old one would keep the live {dataset_of(job)} on the old logic. Replay it onto "
            f"the live inputs: `kappa replay start {job.name}` (or the whole set below the change: "
            f"`kappa replay start <changed job> --downstream`)"
        )


def declared_job(name: str, version: int | None = None) -> JobSpec:
    """The discovered job `name`, if this code declares `version` (default: the declared one)."""

    job = get_job(name)
    if version is not None and version != job.version:
        raise KappaError(
            f"jobs/{name} declares v{job.version}: running that code as v{version} would write v{job.version}'s "
            f"logic into v{version}'s output. Run v{version} from the code that declares it."
        )
    return job


def made_versions_late_topics(jobs: Mapping[str, JobSpec], made: Mapping[str, Iterable[int]]) -> list[Topic]:
    """The `.late` topic of each version `made` here (job -> versions), declared and live or not: a replay's
    version, or one kept for a rollback, made before its output kind had a late topic gets it from `kappa topics
    apply` (its runner refuses to start without it)."""
    return [
        output_of(output_of(job.output).versioned(version)).late_events(version)
        for name, job in jobs.items()
        for version in made.get(name, ())
    ]


def topics_to_apply(settings: KappaSettings, catalog: Iterable[Topic]) -> list[Topic]:
    """`cluster_topics` for the discovered jobs and the live aliases (none yet on a fresh cluster), and the late
    topics of the other versions made here (`made_versions_late_topics`)."""

    jobs = discover()
    wanted = {t.name: t for t in cluster_topics(catalog, jobs, AliasRegistry(settings).all())}
    made = {name: known_versions(settings, name) for name in jobs}
    for topic in made_versions_late_topics(jobs, made):
        wanted.setdefault(topic.name, topic)
    return list(wanted.values())


def ensure_live(settings: KappaSettings, job: JobSpec, version: int) -> Alias | None:
    """A dataset with no live version gets one: the first version of its job that runs. Later versions go
    live only by a cutover. Returns the alias it set, None if the dataset already had one."""

    recorded = recorded_binding(settings, job.name, version)
    if recorded is not None and recorded.origin == REPLAY:
        return None  # a replay's version goes live by its cutover, as every other version does
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
    details = {"physical": alias.physical, "dataset": dataset}
    registry.record(job.name, "deploy", to_version=version, from_version=None, details=details)
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
