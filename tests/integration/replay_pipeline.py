"""A deployable copy of the pipeline for replay tests: its own topics, its own code to change.

A replay is about code that changes while the old version keeps running. So each test deploys from its own
copy of `jobs/`, with every catalog topic prefixed (nothing shared with other tests), and its own copy of
`schemas/` with the expectation suites also under the prefixed names, so the data contracts apply as in the
pipeline. It runs the `kappa` CLI against it as an operator would (`PYTHONPATH` puts the copy first). A logic
change is an edit of the copy; the old code stays in an earlier copy.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from jobs.clickstream.generator import ProfileVersion, StreamConfig, click_messages, clicks, clickstream
from jobs.clickstream.produce import generate
from kappa.contracts.avro_serde import AvroEncoder
from kappa.contracts.expectations import EXPECTATIONS_DIR
from kappa.contracts.registry import Registry, value_subject
from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import MINUTE_MS, Cleanup, Topic
from kappa.core.settings import KappaSettings
from kappa.kafka.clients import produce_all
from kappa.lifecycle.lag import lag
from tests import oracles
from tests.environment import stack_env

REPO = Path(__file__).resolve().parents[2]
CATALOG_TOPICS = ("clicks", "user_profiles", "enriched_clicks", "sessions")
# The Delta views' tables, by the job that writes each (a table's alias is `delta:<table>`, global on the stack).
VIEW_TABLES = {"page_stats": "page_stats", "sessions_table": "sessions", "user_activity": "user_activity"}
# Small, and with late profile versions: a shorter profile lateness changes some answers.
CONFIG = StreamConfig(events=3000, users=30, seed=41, profile_change_share=0.04, late_profile_share=0.5)


@dataclass(frozen=True)
class Deployment:
    """One copy of the job code, and how to run the CLI with it."""

    code: Path  # holds jobs/
    prefix: str
    env: dict[str, str]

    def settings(self, stack: KappaSettings) -> KappaSettings:
        """The stack's settings as this copy's commands see them (its own Delta, checkpoints, deployments)."""
        fields = {"delta_root", "checkpoint_root", "deployments_dir", "schemas_dir"}
        return stack.model_copy(
            update={
                name: (Path(value) if name.endswith("_dir") else value)
                for name in fields
                if (value := self.env.get(f"KAPPA_{name.upper()}")) is not None
            }
        )

    def kappa(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """The CLI run to its end. Each command's seconds are printed (a failing test shows them: where a slow
        test spends its time)."""
        started, ended = time.monotonic(), "timed out"
        try:
            done = subprocess.run(
                [sys.executable, "-m", "kappa.cli", *args],
                cwd=self.code,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            ended = f"exit {done.returncode}"
        finally:
            print(f"{time.monotonic() - started:6.1f} s  kappa {shlex.join(args)} ({ended})", flush=True)
        if check and done.returncode != 0:
            raise AssertionError(f"kappa {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def popen(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        """The CLI started, its output (stdout and stderr) on a pipe; `env` over the copy's environment."""
        return subprocess.Popen(
            [sys.executable, "-m", "kappa.cli", *args],
            cwd=self.code,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def edit(self, relative: str, old: str, new: str) -> None:
        path = self.code / "jobs" / relative
        text = path.read_text()
        assert old in text, f"{old!r} not in {path}"
        path.write_text(text.replace(old, new))

    @contextlib.contextmanager
    def imported(self) -> Iterator[ModuleType]:
        """This copy's jobs/ as the `jobs` package of this process (what a Dagster code location reload does)
        and of every process it starts (PYTHONPATH, and the copy as the working folder: `python -m` puts the
        working folder first on the path); the checkout's again afterwards. Yields the copy's catalog. For tests
        that run platform code in-process (Dagster definitions, sensors) on the copy."""

        def jobs_modules() -> list[str]:
            return [name for name in sys.modules if name == "jobs" or name.startswith("jobs.")]

        with pytest.MonkeyPatch.context() as patch:  # undoes all of it, the checkout's modules back last
            for name in jobs_modules():
                patch.delitem(sys.modules, name)
            patch.syspath_prepend(str(self.code))
            patch.setenv("PYTHONPATH", self.env["PYTHONPATH"])
            patch.chdir(self.code)
            try:
                catalog = importlib.import_module("jobs.catalog")
                assert Path(str(catalog.__file__)).is_relative_to(self.code), catalog.__file__
                yield catalog
            finally:
                for name in jobs_modules():  # the copy's
                    del sys.modules[name]

    def caught_up(self, stack: KappaSettings, versions: Mapping[str, int]) -> bool:
        """Has each job version read its inputs to their ends (consumer lag 0)? Asked with this copy's code: the
        topics a version reads are its declaration's, which the checkout's `jobs` would name differently."""
        settings = self.settings(stack)
        with self.imported():
            for job, version in versions.items():
                if lag(settings, job, version).total:  # lag raises when it cannot be measured
                    return False
        return True

    def copy(self, to: Path) -> Deployment:
        """The same deployment from another copy of the code (to change it while this one stays)."""
        shutil.copytree(self.code, to)
        return Deployment(to, self.prefix, {**self.env, "PYTHONPATH": str(to)})


def deploy_copy(
    stack: KappaSettings,
    where: Path,
    prefix: str,
    catalog_edits: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    *,
    tables: bool = False,
) -> Deployment:
    """A copy of jobs/ whose catalog topics are `<prefix><name>` (and `catalog_edits` applied to the catalog's
    text), set up on the stack (topics, schemas). With `tables`, the views' Delta tables are `<prefix><table>`
    too (their aliases are the stack's: a copy that deploys the views must not share them)."""
    code = where / "code"
    shutil.copytree(REPO / "jobs", code / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    catalog = code / "jobs" / "catalog.py"
    text = catalog.read_text()
    for name in CATALOG_TOPICS:
        text, n = re.subn(rf'name="{name}"', f'name="{prefix}{name}"', text)
        assert n == 1, name
    for old, new in (catalog_edits or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    catalog.write_text(text)
    # A copy is a new deployment of the pipeline: each job's history starts at version 1 there, whatever version the
    # checkout declares, so a test's flows name their versions 1, 2, 3 (its edits bump "version=1,").
    for declaration in (code / "jobs").glob("*/declaration.py"):
        declared, n = re.subn(r"\n    version=\d+,", "\n    version=1,", declaration.read_text())
        assert n <= 1, declaration
        declaration.write_text(declared)
    for job, table in VIEW_TABLES.items() if tables else ():
        declaration = code / "jobs" / job / "declaration.py"
        declared = declaration.read_text()
        declared, n = re.subn(rf'DeltaTable\(\s*"{table}"', f'DeltaTable("{prefix}{table}"', declared)
        assert n == 1, job
        declaration.write_text(declared)
    env = stack_env(
        stack,
        PYTHONPATH=str(code),
        PYTHONUNBUFFERED="1",  # progress lines reach the test as they are logged
        **{
            "KAPPA_DELTA_ROOT": str(where / "delta"),
            "KAPPA_CHECKPOINT_ROOT": str(where / "checkpoints"),
            "KAPPA_DEPLOYMENTS_DIR": str(where / "deployments"),
            "KAPPA_SCHEMAS_DIR": str(copy_schemas(where / "schemas", prefix, tables)),
            **(env or {}),
        },
    )
    deployment = Deployment(code, prefix, env)
    deployment.kappa("topics", "apply")
    deployment.kappa("schemas", "apply")
    return deployment


def copy_schemas(to: Path, prefix: str, tables: bool = False) -> Path:
    """The repository's schemas and expectation suites for a copy: a topic's suite is kept under its dataset
    name, which the copy prefixes, so the copy runs under the same data contracts as the pipeline itself."""
    shutil.copytree(REPO / "schemas", to)
    suites = to / EXPECTATIONS_DIR
    for name in (*CATALOG_TOPICS, *(VIEW_TABLES.values() if tables else ())):
        if (suites / f"{name}.json").exists():
            shutil.copy(suites / f"{name}.json", suites / f"{prefix}{name}.json")
    return to


def produce(stack: KappaSettings, d: Deployment, part: slice, config: StreamConfig = CONFIG) -> None:
    """That part of the generated stream into the copy's clicks and user_profiles."""
    clicks = Topic(f"{d.prefix}clicks", 4, Cleanup.COMPACT, value_schema="clicks.avsc")
    profiles = Topic(f"{d.prefix}user_profiles", 4, Cleanup.COMPACT, value_schema="user_profiles.avsc")
    generate(stack, config, clicks, profiles, progress=None, emissions=part)


def produce_clicks(stack: KappaSettings, topic: Topic, count: int, seed: int, first: int = 0) -> set[str]:
    """Clicks `first` to `first + count` of the seeded stream, well formed, into `topic`; their event ids."""
    made = list(clicks(first + count, seed=seed))[first:]
    with Registry(stack.registry) as registry:
        encoder = AvroEncoder(registry, value_subject(topic.name), topic_value_schema(stack.schemas_path, topic))
        produce_all(stack, topic.name, click_messages(iter(made), encoder.encode, topic.partitions))
    return {c.event_id for c in made}


def rule(config: StreamConfig, lateness_minutes: int, emissions: slice) -> dict[str, tuple[int | None, str]]:
    """event_id -> (profile_version, segment): the as-of rule over that part of the log (a fresh run), computed
    independently of the job (tests/oracles.py's SQL, which shares no code with jobs/enrich_clicks)."""
    profiles: list[tuple[str, int, int, int, str, str]] = []
    clicks: list[tuple[str, str, str, int]] = []
    for n, emission in enumerate(clickstream(config)):
        if n < (emissions.start or 0) or (emissions.stop is not None and n >= emissions.stop):
            continue
        r = emission.record
        if isinstance(r, ProfileVersion):
            profiles.append((r.user_id, r.profile_version, r.valid_from_ms, emission.log_time_ms, r.segment,
                             r.country))  # fmt: skip
        else:
            clicks.append((r.event_id, r.user_id, r.page, r.event_time_ms))
    enriched = oracles.enrichment(clicks, profiles, lateness_minutes * MINUTE_MS)
    return {key: (version, segment) for key, (version, segment, _country, _page) in enriched.items()}


def enriched_table(changes: dict[str, dict[str, object] | None]) -> dict[str, tuple[object, object]]:
    """event_id -> (profile_version, segment) of the enriched clicks a reader holds (None: deleted)."""
    return {k: (v["profile_version"], v["segment"]) for k, v in changes.items() if v is not None}
