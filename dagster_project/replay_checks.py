"""The replay's verification in Dagster: two blocking checks on every job's output asset.

- `replay_quality` (the dataset's quality suite) and `replay_reconciliation` (counts and key-level differences
  against the live version). A replay run reports them from its verification (the `verification` op: a failed
  check fails that step, so nothing after it runs); executed on their own (or after a materialization), they
  read the latest verification the audit trail `kappa.audit` holds for the declared version.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetKey,
    Failure,
    Field,
    In,
    MetadataValue,
    Nothing,
    OpExecutionContext,
    Out,
    asset_check,
    op,
)

from dagster_project.assets import output_key
from dagster_project.resources import KappaResource
from kappa.kafka.aliases import Alias, Step
from kappa.runtime.binding import dataset_of
from kappa.runtime.declaration import JobSpec
from kappa.runtime.discovery import get_job

QUALITY_CHECK = "replay_quality"
RECONCILIATION_CHECK = "replay_reconciliation"
REPLAY_CHECKS = (QUALITY_CHECK, RECONCILIATION_CHECK)
CHECK_DOC = {
    QUALITY_CHECK: "The dataset's quality suite on",
    RECONCILIATION_CHECK: "Counts and key-level differences against the live version, of",
}


def check_evaluations(report: Mapping[str, Any]) -> dict[str, tuple[bool, str, dict[str, Any]]]:
    """check name -> (passed, description, metadata), from a verification report (`Verification.as_dict` of
    kappa.lifecycle.verification, as the audit trail records it).

    The quality check fails when the dataset's suite failed; the reconciliation check fails when keys of the
    live version are missing from the new one, and carries whatever else made the whole report fail, so the
    two checks never pass together on a report that failed."""
    quality: dict[str, Any] = dict(report.get("quality") or {})
    reconciliation: dict[str, Any] = dict(report.get("reconciliation") or {})
    problems = [str(p) for p in report.get("problems") or []]
    quality_ok = quality.get("success", True) is not False
    quality_text = (
        f"suite {quality['suite']}: {'passed' if quality_ok else 'failed'}"
        if quality.get("suite")
        else str(quality.get("note", "no expectation suite"))
    )
    quality_meta: dict[str, Any] = {"suite": str(quality.get("suite") or "none"), "report": MetadataValue.json(quality)}
    if quality.get("failed"):
        quality_meta["failed"] = MetadataValue.json(quality["failed"])
    reconciliation_ok = not reconciliation.get("only_in_live") and not (
        not report.get("passed") and quality_ok
    )  # a failed report with a passing suite: the reconciliation is what failed
    if reconciliation.get("against"):
        reconciliation_text = (
            f"against {reconciliation['against']}: {reconciliation.get('rows_new', 0):,} rows new, "
            f"{reconciliation.get('rows_live', 0):,} live, {reconciliation.get('only_in_new', 0):,} only in new, "
            f"{reconciliation.get('only_in_live', 0):,} only in live, {reconciliation.get('changed', 0):,} changed"
        )
        reconciliation_meta: dict[str, Any] = {
            "against": reconciliation["against"],
            **{
                k: int(reconciliation.get(k, 0))
                for k in ("rows_new", "rows_live", "only_in_new", "only_in_live", "changed")
            },
            "keys": MetadataValue.json(list(reconciliation.get("keys", []))),
            "samples": MetadataValue.json(reconciliation.get("samples", {})),
        }
    else:
        reconciliation_text = str(reconciliation.get("note", "nothing to reconcile against"))
        reconciliation_meta = {"against": "none"}
    if problems:
        reconciliation_meta["problems"] = MetadataValue.json(problems)
    return {
        QUALITY_CHECK: (quality_ok, quality_text, quality_meta),
        RECONCILIATION_CHECK: (reconciliation_ok, reconciliation_text, reconciliation_meta),
    }


@op(
    config_schema={"job": Field(str), "asset_key": Field([str])},
    ins={"report": In(dict)},
    out=Out(Nothing),
    description="The verification report as the results of the output asset's blocking checks "
    f"({', '.join(REPLAY_CHECKS)}); a failed check fails this step, so the version neither goes live nor is "
    "cut over.",
)
def verification(context: OpExecutionContext, report: dict[str, Any]) -> None:
    root = context.op_config["job"]
    failed: list[str] = []
    # A cascade's report holds each member's: each one's checks land on its own output asset.
    for member in report.get("set") or [report | {"job": root}]:
        job, version = str(member.get("job", root)), member.get("version", report.get("version"))
        key = AssetKey(context.op_config["asset_key"]) if job == root else output_key(get_job(job))
        results = check_evaluations(member)
        for name, (passed, description, metadata) in results.items():
            context.log_event(
                AssetCheckEvaluation(
                    asset_key=key,
                    check_name=name,
                    passed=passed,
                    description=f"v{version}: {description}",
                    metadata={"replay_version": version, **metadata},
                    blocking=True,
                )
            )
        names = [name for name, (passed, _, _) in results.items() if not passed]
        if names or not member.get("passed"):
            problems = "; ".join(str(p) for p in member.get("problems") or [])
            failed.append(f"{job} v{version} ({', '.join(names) or 'failed'}){': ' + problems if problems else ''}")
    if failed or not report.get("passed"):
        whole = " and the set with it" if report.get("set") else ""
        raise Failure(
            description=f"failed verification: {'; '.join(failed) or 'the replay did not finish'}: it does not go "
            f"live{whole}, and nothing is cut over.",
        )
    context.log.info(
        f"{root} v{report.get('version')} passed verification" + (" with its set" if report.get("set") else "")
    )


def replay_checks(job: JobSpec) -> list[AssetChecksDefinition]:
    """The output asset's blocking checks. A replay run reports them; run on their own, they read the latest
    verification recorded in the audit trail for the declared version (no Spark in Dagster's process)."""
    key = output_key(job)

    def make(name: str) -> AssetChecksDefinition:
        @asset_check(
            asset=key,
            name=name,
            blocking=True,
            description=CHECK_DOC[name]
            + " a replayed version (reported by replay runs; on its own: the audit trail's latest verification of "
            "the declared version).",
        )
        def _recorded(context: AssetCheckExecutionContext, kappa: KappaResource) -> AssetCheckResult:
            passed, description, metadata = recorded_verification(kappa, job)[name]
            return AssetCheckResult(passed=passed, description=description, metadata=metadata)

        return _recorded

    return [make(name) for name in REPLAY_CHECKS]


def recorded_verification(kappa: KappaResource, job: JobSpec) -> dict[str, tuple[bool, str, dict[str, Any]]]:
    """The checks' results from the audit trail (no Spark in Dagster's process)."""
    from kappa.kafka.aliases import AliasRegistry

    registry = AliasRegistry(kappa.settings())
    return evaluations_from_audit(job, registry.steps(job.name), registry.live(dataset_of(job)))


def evaluations_from_audit(
    job: JobSpec, steps: Sequence[Step], live: Alias | None
) -> dict[str, tuple[bool, str, dict[str, Any]]]:
    """check name -> (passed, description, metadata) from the latest `verify` step of the declared version. A
    declared version that is live without one went live as the dataset's first deployment (nothing to
    reconcile); a verify step that crashed passes neither check."""
    dataset = dataset_of(job)
    verifies = [
        s for s in steps if s.step == "verify" and s.to_version == job.version and s.facts.get("dataset") == dataset
    ]
    if verifies:
        step = verifies[-1]
        if "error" in step.facts:
            note = f"v{job.version}: the verification by {step.by} did not complete: {step.facts['error']}"
            return {name: (False, note, {"verified_at": step.at}) for name in REPLAY_CHECKS}
        report = step.facts | {"passed": step.outcome == "ok"}
        return {
            name: (passed, f"v{job.version}, verified by {step.by}: {text}", meta | {"verified_at": step.at})
            for name, (passed, text, meta) in check_evaluations(report).items()
        }
    if live is not None and live.version == job.version:
        note = f"v{job.version} is live ({live.reason}); no replay of it was verified: nothing to reconcile"
        return {name: (True, note, {"live_version": live.version}) for name in REPLAY_CHECKS}
    note = f"v{job.version} has not been verified: launch replay_{job.name}"
    return {name: (False, note, {"live_version": live.version if live else "none"}) for name in REPLAY_CHECKS}


def replay_asset_checks(jobs: Mapping[str, JobSpec]) -> list[AssetChecksDefinition]:
    return [check for job in jobs.values() for check in replay_checks(job)]
