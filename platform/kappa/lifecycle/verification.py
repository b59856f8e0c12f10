"""Step 4 of the replay protocol: the quality suite on the new output, and its reconciliation against the live
version (as it was when the catch-up started)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kappa.contracts.expectations import suite_for, validate_dataframe
from kappa.core.settings import KappaSettings
from kappa.kafka.aliases import AliasRegistry
from kappa.lifecycle.horizon import iso
from kappa.lifecycle.model import Replay
from kappa.runtime.declaration import JobSpec
from kappa.runtime.outputs import output_of
from kappa.spark.session import get_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


log = logging.getLogger("kappa.replay")
SAMPLES = 5


@dataclass(frozen=True)
class Verification:
    passed: bool
    quality: dict[str, Any]
    reconciliation: dict[str, Any]
    problems: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "quality": self.quality,
            "reconciliation": self.reconciliation,
            "problems": list(self.problems),
        }


def read_output(
    spark: SparkSession, settings: KappaSettings, job: JobSpec, version: int, *, as_of_ms: int | None = None
) -> DataFrame:
    """One version's output as readers see it (`Output.read`): a topic's latest value per key, or the Delta table.
    With `as_of_ms`, as it was then: the records written until then, or the table's last commit by then."""
    return output_of(job.output).read(spark, settings, version, as_of_ms=as_of_ms)


def reconcile(new: DataFrame, live: DataFrame, keys: list[str]) -> dict[str, Any]:
    """Counts and key-level differences between two versions' outputs, with samples of each kind.

    One full outer join, kept in memory, and one aggregation for every count: each output is read once."""
    # Lazy: pyspark, only where a Spark session runs (this module is imported without one).
    from pyspark.sql import functions as F

    values = [c for c in new.columns if c not in keys and c in live.columns]
    n = new.withColumn("_in", F.lit(True)).alias("n")
    o = live.withColumn("_in", F.lit(True)).alias("o")
    in_new, in_live = F.col("n._in").isNotNull(), F.col("o._in").isNotNull()
    differs = F.lit(False)
    for c in values:
        differs = differs | ~F.col(f"n.{c}").eqNullSafe(F.col(f"o.{c}"))
    joined = (
        n.join(o, on=[F.col(f"n.{k}").eqNullSafe(F.col(f"o.{k}")) for k in keys], how="full_outer")
        .select(
            in_new.alias("in_new"),
            in_live.alias("in_live"),
            (in_new & in_live & differs).alias("changed"),
            *[F.coalesce(F.col(f"n.{k}"), F.col(f"o.{k}")).alias(k) for k in keys],
            *[F.struct(F.col(f"o.{c}").alias("live"), F.col(f"n.{c}").alias("new")).alias(c) for c in values],
        )
        .persist()
    )
    try:
        counts = joined.agg(
            F.count(F.when(F.col("in_new"), 1)).alias("rows_new"),
            F.count(F.when(F.col("in_live"), 1)).alias("rows_live"),
            F.count(F.when(F.col("in_new") & ~F.col("in_live"), 1)).alias("only_in_new"),
            F.count(F.when(F.col("in_live") & ~F.col("in_new"), 1)).alias("only_in_live"),
            F.count(F.when(F.col("changed"), 1)).alias("changed"),
        ).first()
        assert counts is not None

        def sample(where: Any, side: str) -> list[dict[str, Any]]:
            rows = joined.where(where).select(*keys, *[F.col(f"{c}.{side}").alias(c) for c in values])
            return [r.asDict(recursive=True) for r in rows.limit(SAMPLES).collect()]

        def changed() -> list[dict[str, Any]]:
            return [
                {**{k: r[k] for k in keys}, **{c: r[c].asDict() for c in values if r[c]["live"] != r[c]["new"]}}
                for r in joined.where(F.col("changed")).limit(SAMPLES).collect()
            ]

        found = {
            name: int(counts[name]) for name in ("rows_new", "rows_live", "only_in_new", "only_in_live", "changed")
        }
        # A kind with no keys has no samples to look for: each look is a Spark job.
        return {
            "keys": keys,
            **found,
            "samples": {
                "only_in_new": sample(F.col("in_new") & ~F.col("in_live"), "new") if found["only_in_new"] else [],
                "only_in_live": sample(F.col("in_live") & ~F.col("in_new"), "live") if found["only_in_live"] else [],
                "changed": changed() if found["changed"] else [],
            },
        }
    finally:
        joined.unpersist()


def output_keys(job: JobSpec, frame: DataFrame) -> list[str]:
    """What identifies a row of the output (`Output.row_keys`): a topic's Kafka key, a view's declared keys (else
    every column)."""
    return output_of(job.output).row_keys(frame.columns)


def catch_up_started_ms(registry: AliasRegistry, replay: Replay) -> int | None:
    """When the version's last catch-up launch started (before its input ends were fixed), from the audit."""
    launches = [
        s.facts["started_ms"]
        for s in registry.steps(replay.job.name)
        if s.step == "catch-up"
        and s.to_version == replay.version
        and s.facts.get("dataset") == replay.dataset
        and isinstance(s.facts.get("started_ms"), int)
    ]
    return launches[-1] if launches else None


def verify(settings: KappaSettings, replay: Replay) -> Verification:
    """The quality suite on the new output, and its reconciliation against the live version."""

    log.info("verifying %s v%d: the quality suite, then the reconciliation", replay.job.name, replay.version)
    spark = get_spark(settings, f"kappa-verify-{replay.job.name}")
    new = read_output(spark, settings, replay.job, replay.version).persist()  # the suite and the join read it
    try:
        return _verify(settings, replay, new)
    finally:
        new.unpersist()


def _verify(settings: KappaSettings, replay: Replay, new: DataFrame) -> Verification:
    problems: list[str] = []
    quality = _quality(settings, replay, new)
    if not quality.get("success", True):
        problems.append(f"the quality suite {quality.get('suite')} failed: {quality.get('failed')}")
    live = replay.live
    if live is None:
        reconciliation: dict[str, Any] = {"against": None, "note": "nothing live yet: this is the first version"}
    else:
        # The live version keeps processing while the new one catches up to the input ends it saw at its start:
        # compare with the live output as it was then, or keys the live version wrote since would count as lost.
        as_of = catch_up_started_ms(AliasRegistry(settings), replay)
        old = read_output(new.sparkSession, settings, replay.job, live.version, as_of_ms=as_of)
        against = f"v{live.version}" + (f" as of {iso(as_of)} (the catch-up's start)" if as_of else "")
        reconciliation = {"against": against} | reconcile(new, old, output_keys(replay.job, new))
        if reconciliation["only_in_live"]:
            problems.append(
                f"{reconciliation['only_in_live']} key(s) of the live v{live.version} are missing from "
                f"v{replay.version} (samples in the report)"
            )
    return Verification(not problems, quality, reconciliation, tuple(problems))


def _quality(settings: KappaSettings, replay: Replay, frame: DataFrame) -> dict[str, Any]:
    """The output's expectation suite on the whole output (none kept for it: nothing to run)."""

    name = output_of(replay.job.output).suite
    suite = suite_for(settings, name)
    if suite is None:
        return {"suite": None, "note": f"no expectation suite kept for {name}"}
    result: dict[str, Any] = validate_dataframe(frame, suite).as_dict()
    return result


def verified(registry: AliasRegistry, job: str, version: int, dataset: str) -> bool:
    """Did the latest verification of this version of the dataset pass?"""
    outcomes = [
        s.outcome
        for s in registry.steps(job)
        if s.step == "verify" and s.to_version == version and s.facts.get("dataset") == dataset
    ]
    return bool(outcomes) and outcomes[-1] == "ok"
