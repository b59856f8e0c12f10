"""Find the jobs: every package under jobs/ with a `declaration` module that defines `JOB`."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.runtime.declaration import JobSpec


def discover(package: str = "jobs") -> dict[str, JobSpec]:
    """Job name -> declaration. Adding a job is adding a folder: nothing else to wire."""
    root = importlib.import_module(package)
    found: dict[str, JobSpec] = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        try:
            module = importlib.import_module(f"{package}.{info.name}.declaration")
        except ModuleNotFoundError as exc:
            if exc.name == f"{package}.{info.name}.declaration":
                continue  # a helper package, not a job
            raise
        spec = getattr(module, "JOB", None)
        if not isinstance(spec, JobSpec):
            raise KappaError(f"{package}/{info.name}/declaration.py must define JOB = JobSpec(...)")
        if spec.name != info.name:
            raise KappaError(f"{package}/{info.name}: the declaration names the job {spec.name!r}, not {info.name!r}")
        found[spec.name] = spec
    return found


def get_job(name: str, package: str = "jobs") -> JobSpec:
    jobs = discover(package)
    if name not in jobs:
        raise KappaError(f"no job {name!r}; the jobs are: {', '.join(sorted(jobs)) or 'none'} (`kappa jobs list`)")
    return jobs[name]


def writers_of(jobs: Iterable[JobSpec]) -> dict[str, str]:
    """Topic -> the job that writes it, among these jobs."""
    return {job.output.name: job.name for job in jobs if isinstance(job.output, Topic)}


def pipeline_order(jobs: dict[str, JobSpec]) -> list[JobSpec]:
    """The jobs in an order where each runs after every job that writes one of its inputs (then by name)."""
    writers = writers_of(jobs.values())
    ordered: list[JobSpec] = []
    placed: set[str] = set()
    while len(ordered) < len(jobs):
        ready = [
            job
            for name, job in sorted(jobs.items())
            if name not in placed
            and all(writers.get(t.name, name) in placed | {name} for t in (*job.inputs, *job.lookups))
        ]
        if not ready:
            raise KappaError(f"the jobs {sorted(set(jobs) - placed)} read each other's outputs in a cycle")
        ordered += ready
        placed |= {job.name for job in ready}
    return ordered


def load_catalog(module: str = "jobs.catalog") -> tuple[Topic, ...]:
    """The declared topics (the catalog module's TOPICS)."""
    try:
        topics: tuple[Topic, ...] = importlib.import_module(module).TOPICS
    except (ImportError, AttributeError) as exc:
        raise KappaError(f"cannot load the topic catalog {module}.TOPICS: {exc}") from None
    return topics
