"""Steps 5 to 8 of the replay protocol, one version at a time: what a version must be to go live, take or give
back its alias (cutover, rollback), and retire."""

from __future__ import annotations

import logging
import shutil
from typing import Any

from confluent_kafka import KafkaException

from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import Alias, AliasRegistry
from kappa.kafka.clients import admin_client
from kappa.lifecycle import deployments
from kappa.lifecycle.lag import lag
from kappa.lifecycle.launchers import is_running
from kappa.lifecycle.model import Replay, ReplayRefusedError
from kappa.lifecycle.state_files import Health, checkpoint_lock, load
from kappa.lifecycle.verification import verified
from kappa.runtime.access import revoke_version
from kappa.runtime.binding import physical_output, point_alias, read_topics
from kappa.runtime.declaration import JobSpec, version_checkpoints
from kappa.runtime.outputs import output_of

log = logging.getLogger("kappa.replay")


def running(settings: KappaSettings, job: str, version: int) -> bool:
    deployment = load(settings, job, version)
    return deployment is not None and deployment.desired == "running" and is_running(deployment)


def require_running(settings: KappaSettings, job: str, version: int, doing: str) -> None:
    if not running(settings, job, version):
        raise ReplayRefusedError(
            f"{job} v{version} is not running: {doing} would point readers at a version nobody updates. "
            f"Start it first: `kappa replay golive {job} --version {version}`"
        )


def require_caught_up(settings: KappaSettings, job: str, version: int) -> int:
    behind = lag(settings, job, version).total
    if behind > settings.cutover_max_lag:
        raise ReplayRefusedError(
            f"{job} v{version} is {behind:,} records behind its inputs, more than the cutover allows "
            f"({settings.cutover_max_lag:,}, KAPPA_CUTOVER_MAX_LAG): let it catch up (`kappa jobs status`), then "
            "cut over"
        )
    return behind


def cutover(settings: KappaSettings, replay: Replay, *, by: str | None = None, force: bool = False) -> Alias:
    registry = AliasRegistry(settings)
    live = replay.live
    if live is not None and live.version == replay.version:
        raise ReplayRefusedError(f"{replay.dataset} already points at v{replay.version}")
    if not force and not verified(registry, replay.job.name, replay.version, replay.dataset):
        raise ReplayRefusedError(
            f"{replay.job.name} v{replay.version} has not passed verification: run "
            f"`kappa replay verify {replay.job.name} --version {replay.version}` (or `replay start`) first"
        )
    require_running(settings, replay.job.name, replay.version, "the cutover")
    require_caught_up(settings, replay.job.name, replay.version)
    reason = "cutover" + (" (forced past verification)" if force else "")
    expected = live.version if live else None
    return point_alias(settings, registry, replay.job, replay.version, expected=expected, reason=reason, by=by)


def rollback(settings: KappaSettings, replay: Replay, *, by: str | None = None) -> Alias:
    live = replay.live
    if live is None or live.previous_version is None:
        raise ReplayRefusedError(f"{replay.dataset} has no earlier version to roll back to")
    back = live.previous_version
    if live.reason.startswith("rollback"):  # a second rollback would undo the first, unverified
        raise ReplayRefusedError(
            f"{replay.dataset} is at v{live.version} by a rollback from v{back}: nothing earlier to roll back to. "
            f"To return to v{back}, cut over to it (`kappa replay cutover {replay.job.name} --version {back}`), "
            "which needs its verification to have passed"
        )
    if not output_exists(settings, replay.job, back):
        raise ReplayRefusedError(f"{replay.job.name} v{back} was retired: its output is gone; replay it instead")
    require_running(settings, replay.job.name, back, "the rollback")
    reason = f"rollback from v{live.version}"
    return point_alias(settings, AliasRegistry(settings), replay.job, back, expected=live.version, reason=reason, by=by)


def output_exists(settings: KappaSettings, job: JobSpec, version: int) -> bool:
    return output_of(job.output).exists(settings, version)


def retire(settings: KappaSettings, replay: Replay) -> dict[str, Any]:
    """Stop the version and delete its output, side topic, checkpoint and consumer group."""
    live = replay.live
    if live is not None and live.version == replay.version:
        raise ReplayRefusedError(
            f"{replay.job.name} v{replay.version} is live for {replay.dataset}: cut over to another version first"
        )

    output = physical_output(replay.job, settings, replay.version)[1]
    readers = []  # a Delta output is read by no job: only a topic can be another running version's input
    for d in (s.deployment for s in deployments.status(settings) if s.health is Health.RUNNING):
        try:
            reads = read_topics(settings, d.job, d.version)
        except KappaError as exc:
            raise ReplayRefusedError(
                f"cannot tell whether {d.job} v{d.version}, which runs, reads {output} ({exc}): stop it first "
                f"(`kappa jobs stop {d.job} --version {d.version}`)"
            ) from None
        if output in reads:
            readers.append(f"{d.job} v{d.version}")
    if readers:
        raise ReplayRefusedError(
            f"{', '.join(readers)} read {output} and run: retiring it would pull their input from under them. "
            "Cut them over to versions that read the new one (`kappa replay start <changed job> --downstream`), "
            "roll them over, and stop or retire them first"
        )
    stopped = deployments.stop_if_running(settings, replay.job.name, replay.version)
    with checkpoint_lock(settings, replay.job.name, replay.version, "a retire"):  # refused while in use
        deleted = _delete_version(settings, replay)
    checkpoints = version_checkpoints(settings, replay.job.name, replay.version)
    return {"stopped": stopped, "deleted": deleted, "checkpoint": checkpoints}


def _delete_version(settings: KappaSettings, replay: Replay) -> list[str]:
    """The version's output, side topic, checkpoint and consumer group."""

    ctx = replay.context(settings)
    deleted = output_of(replay.job.output).delete(settings, replay.version)
    # Every query's checkpoint, and the start point the version was pinned to (kappa.runtime.start_point).
    checkpoints = version_checkpoints(settings, replay.job.name, replay.version)
    shutil.rmtree(checkpoints.removeprefix("file:"), ignore_errors=True)
    admin = admin_client(settings)
    try:
        for future in admin.delete_consumer_groups([ctx.consumer_group], request_timeout=15).values():
            future.result(timeout=15)
    except KafkaException as exc:
        log.info("group %s: %s", ctx.consumer_group, exc)  # no group recorded yet: nothing to delete
    if settings.secured:  # its principal goes with it: nothing may act as a version that is gone
        revoke_version(settings, replay.job.name, replay.version)
    return deleted
