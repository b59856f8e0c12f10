"""A change's reach, and its replay as one set: the changed job and every dataset below it.

    plan      from the declarations: every job that reads, directly or not, what the changed job writes; the
              version each would replay, what it reads (records, replay horizon) and how long it should take
    start     each member's replay (`kappa.lifecycle.protocol.start`: check, prepare, catch-up, verify) in pipeline
              order, each new version bound to the new versions of its inputs, beside the live set; a failure
              stops the set, before anything goes live. Launched again, it resumes: a member's version is
              found again by what it reads (its recorded binding), and a verified one is not replayed again.
    golive    every member runs continuously (kappa.lifecycle.protocol.golive)
    cutover   every alias of the set moves in one Kafka transaction, each with its compare-and-set, refused
              unless every member passed verification, runs, and is within `cutover_max_lag` of its inputs
    rollback  the set's aliases move back in one transaction, to versions that still run

A version of a downstream job made by a cascade runs the job's declared code on new inputs: `sessionize` v2
is v1's code reading `enriched_clicks.v2` (kappa.runtime.binding records it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.core.security import librdkafka_config
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import Alias, AliasRegistry, Move
from kappa.lifecycle.horizon import iso, replay_horizon
from kappa.lifecycle.model import Replay, ReplayRefusedError
from kappa.lifecycle.moves import require_caught_up, require_running
from kappa.lifecycle.verification import verified
from kappa.runtime.binding import (
    REPLAY,
    dataset_of,
    describe_inputs,
    input_versions,
    known_versions,
    next_version,
    physical_output,
    recorded_binding,
    writers,
)
from kappa.runtime.declaration import JobSpec
from kappa.runtime.discovery import discover, get_job, pipeline_order

# What a member costs beside reading its records: a Spark session's start, the suite and the reconciliation
# (make bench-cascade on the demo data, 2 cores: 9 to 23 s per member).
MEMBER_FIXED_S = 15.0


@dataclass(frozen=True)
class Member:
    """One job of the set: the version it brings, beside the live one, and what that version reads."""

    job: JobSpec
    version: int
    live: int | None
    inputs: dict[str, int]  # derived input dataset -> the version the new version reads
    why: str
    records: int = 0  # what its catch-up reads (the live input version's size where the new one is not written yet)
    horizon: dict[str, str] = field(default_factory=dict)  # source input -> complete since
    estimate_s: float | None = None
    rate_source: str = ""

    @property
    def dataset(self) -> str:
        return dataset_of(self.job)

    def replay(self, jobs: Mapping[str, JobSpec], aliases: Mapping[str, Alias]) -> Replay:
        return Replay(self.job, self.version, jobs, aliases, self.inputs, self.job.version)


@dataclass(frozen=True)
class Plan:
    root: str
    members: tuple[Member, ...]
    unchanged: tuple[str, ...]  # jobs below the change with nothing to replay, and why

    @property
    def estimate_s(self) -> float | None:
        estimates = [m.estimate_s for m in self.members]
        return None if any(e is None for e in estimates) else sum(e or 0 for e in estimates)

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "members": [
                {
                    "job": m.job.name,
                    "dataset": m.dataset,
                    "live": m.live,
                    "version": m.version,
                    "reads": describe_inputs(m.inputs),
                    "why": m.why,
                    "records": m.records,
                    "horizon": m.horizon,
                    "estimate_s": m.estimate_s,
                }
                for m in self.members
            ],
            "unchanged": list(self.unchanged),
            "estimate_s": self.estimate_s,
        }


def reach(jobs: Mapping[str, JobSpec], root: str) -> list[JobSpec]:
    """The root and every job that reads (inputs or lookups), directly or not, what it writes: in pipeline order."""
    by_dataset = writers(jobs)
    reached = {root}
    ordered = []
    for job in pipeline_order(dict(jobs)):
        reads = {by_dataset[t.name].name for t in (*job.inputs, *job.lookups) if t.name in by_dataset}
        if job.name == root or reads & reached:
            reached.add(job.name)
            ordered.append(job)
    return ordered


def plan(settings: KappaSettings, root: str, *, downstream: bool = True, measure: bool = False) -> Plan:
    """The set a change of `root` replays. With `measure`, each member's records, horizon and time estimate."""
    get_job(root)  # a clear error for an unknown job
    jobs = discover()
    registry = AliasRegistry(settings)
    aliases = registry.all()
    members: list[Member] = []
    unchanged: list[str] = []
    new: dict[str, int] = {}  # dataset -> the version the set brings
    for job in reach(jobs, root) if downstream else [get_job(root)]:
        live = aliases.get(dataset_of(job))
        target = input_versions(job, jobs, aliases) | {d: v for d, v in new.items() if d in _derived(job, jobs)}
        live_reads = _reads(settings, job, jobs, aliases, live)
        if job.name == root and (live is None or job.version > live.version):
            version, why = job.version, f"its logic changed: declared v{job.version}"
        elif live is None:
            unchanged.append(f"{job.name}: never deployed (its first run reads the live inputs)")
            continue
        elif live_reads == target:
            unchanged.append(f"{job.name}: v{live.version} is live and reads {describe_inputs(target)} already")
            continue
        else:
            moved = {d: v for d, v in target.items() if live_reads.get(d) != v}
            version = _version_reading(settings, job, target) or (
                job.version if job.version > live.version else next_version(settings, job)
            )
            why = f"reads {describe_inputs(moved)}" + (
                f" (live v{live.version} reads {describe_inputs(live_reads)})" if live_reads else ""
            )
        new[dataset_of(job)] = version
        members.append(Member(job, version, live.version if live else None, target, why))
    if measure:
        members = [_measured(settings, m, aliases) for m in members]
    return Plan(root, tuple(members), tuple(unchanged))


def _derived(job: JobSpec, jobs: Mapping[str, JobSpec]) -> set[str]:
    by_dataset = writers(jobs)
    return {t.name for t in (*job.inputs, *job.lookups) if t.name in by_dataset}


def _reads(
    settings: KappaSettings, job: JobSpec, jobs: Mapping[str, JobSpec], aliases: Mapping[str, Alias], live: Alias | None
) -> dict[str, int]:
    """What the live version reads: its recorded binding (else, a version from before bindings, the live inputs)."""
    recorded = recorded_binding(settings, job.name, live.version) if live else None
    return dict(recorded.inputs) if recorded else input_versions(job, jobs, aliases)


def _version_reading(settings: KappaSettings, job: JobSpec, inputs: Mapping[str, int]) -> int | None:
    """A version a replay already made of this code on these inputs (a relaunch resumes it)."""
    for version in reversed(known_versions(settings, job.name)):
        recorded = recorded_binding(settings, job.name, version)
        same_code = recorded is not None and recorded.origin == REPLAY and recorded.code_version == job.version
        if same_code and recorded is not None and recorded.inputs == dict(inputs):
            return version
    return None


def _measured(settings: KappaSettings, member: Member, aliases: Mapping[str, Alias]) -> Member:
    """Records to read (the input versions that exist: the live one where the new one is not written yet),
    the source inputs' replay horizons, and the time at this job's last measured replay rate."""
    records = 0
    horizon: dict[str, str] = {}
    for topic in member.job.inputs:
        version = member.inputs.get(topic.name)
        physical = topic if version is None else topic.versioned(version)
        count = _records(settings, physical)
        if count is None and version is not None and topic.name in aliases:  # not written yet: the live one's size
            count = _records(settings, topic.versioned(aliases[topic.name].version))
        records += count or 0
        if version is None:
            found = replay_horizon(settings, topic)
            horizon[topic.name] = "complete" if found.since_ms is None else iso(found.since_ms)
    rate, source = _rate(settings, member.job)
    return Member(
        member.job,
        member.version,
        member.live,
        member.inputs,
        member.why,
        records,
        horizon,
        round(MEMBER_FIXED_S + records / rate, 1) if rate else None,
        source,
    )


def _records(settings: KappaSettings, topic: Topic) -> int | None:
    consumer = Consumer({**librdkafka_config(settings), "group.id": "kappa.plan", "log_level": 0})
    try:
        meta = consumer.list_topics(topic.name, timeout=10).topics.get(topic.name)
        if meta is None or meta.error is not None:
            return None
        total = 0
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)
            total += high - low
        return total
    except KafkaException as exc:
        raise KappaError(f"cannot read the offsets of {topic.name}: {exc} (is Kafka up?)") from None
    finally:
        consumer.close()


def _rate(settings: KappaSettings, job: JobSpec) -> tuple[float | None, str]:
    """The job's replay events/s: its last catch-up on this cluster, else the figure its declaration gives."""
    measured = [
        s.facts["events_per_second"]
        for s in AliasRegistry(settings).steps(job.name)
        if s.step == "catch-up" and s.outcome == "ok" and (s.facts.get("input_rows") or 0) >= 10_000
    ]
    if measured and measured[-1]:
        return float(measured[-1]), "its last catch-up here"
    if job.replay_events_per_s is not None:
        return float(job.replay_events_per_s), "declared (replay_events_per_s)"
    return None, "no figure"


# ------------------------------------------------------------------ cut over, roll back ---------------------


def cutover_set(settings: KappaSettings, the_plan: Plan, *, by: str | None = None) -> tuple[list[Alias], float]:
    """Every member's alias to its new version, in one transaction; refused unless each is ready. Returns the
    aliases and the transaction's seconds."""
    if not the_plan.members:
        raise ReplayRefusedError(f"nothing to cut over below {the_plan.root}: every dataset reads the live set")
    registry = AliasRegistry(settings)
    for m in the_plan.members:
        if not verified(registry, m.job.name, m.version, m.dataset):
            raise ReplayRefusedError(
                f"{m.job.name} v{m.version} has not passed verification: "
                f"`kappa replay start {the_plan.root} --downstream` first; nothing was cut over"
            )
    for m in the_plan.members:  # verified, all of them: now each must run and be caught up
        require_running(settings, m.job.name, m.version, "the cutover")
        require_caught_up(settings, m.job.name, m.version)
    moves = []
    for m in the_plan.members:
        kind, physical = physical_output(m.job, settings, m.version)
        moves.append(Move(m.dataset, m.job.name, kind, m.version, physical, m.live))
    started = time.monotonic()
    moved = registry.move_set(moves, reason=f"cutover of the set of {the_plan.root}", by=by)
    return moved, time.monotonic() - started


def last_set(settings: KappaSettings, root: str) -> list[Alias]:
    """The aliases the last set cutover of `root` moved, if they are all still where it put them."""
    aliases = AliasRegistry(settings).all()
    reason = f"cutover of the set of {root}"
    moved = [a for a in aliases.values() if a.reason == reason]
    if not moved:
        raise ReplayRefusedError(f"no set cutover of {root} is live: nothing to roll back as a set")
    latest = max(a.changed_at for a in moved)
    return [a for a in moved if a.changed_at == latest]


def rollback_set(settings: KappaSettings, root: str, *, by: str | None = None) -> tuple[list[Alias], float]:
    """The set's aliases back to the versions live before its cutover, in one transaction; each must still run.
    Returns the aliases and the transaction's seconds."""
    moved = last_set(settings, root)
    for alias in moved:
        if alias.previous_version is None:
            raise ReplayRefusedError(f"{alias.dataset} had no version before v{alias.version}: nothing to return to")
        require_running(settings, alias.job, alias.previous_version, "the rollback")
    back = [Move(a.dataset, a.job, a.kind, a.previous_version or 0, _physical(settings, a), a.version) for a in moved]
    started = time.monotonic()
    moved = AliasRegistry(settings).move_set(back, reason=f"rollback of the set of {root}", by=by)
    return moved, time.monotonic() - started


def _physical(settings: KappaSettings, alias: Alias) -> str:
    return physical_output(get_job(alias.job), settings, alias.previous_version or 0)[1]
