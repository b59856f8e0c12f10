"""Find the jobs (every package under jobs/ with a `declaration` module that defines `JOB`) and, from them, the
platform's topics (`find_catalog`)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kappa.contracts.topic_declarations import Topic, dead_letters_of
from kappa.core.errors import KappaError
from kappa.kafka.aliases import CONTROL_TOPICS
from kappa.runtime.declaration import JobSpec
from kappa.runtime.outputs import output_of


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


def find_topic(name: str, topics: Iterable[Topic]) -> Topic:
    """The declared topic of that name, or an error naming the declared ones."""
    topics = list(topics)
    for topic in topics:
        if topic.name == name:
            return topic
    declared = ", ".join(sorted(t.name for t in topics)) or "none"
    raise KappaError(f"no topic {name!r} is declared; the declared topics are: {declared}")


def writers_of(jobs: Iterable[JobSpec]) -> dict[str, str]:
    """Topic -> the job that writes it, among these jobs."""
    return {topic.name: job.name for job in jobs if (topic := output_of(job.output).topic) is not None}


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


@dataclass(frozen=True)
class Catalog:
    """The platform's topics, found from the declarations: nothing lists them a second time."""

    datasets: tuple[Topic, ...]  # every dataset topic: the declared ones and those the jobs read, look up or write
    sources: tuple[Topic, ...]  # the datasets no job writes: written outside the platform
    topics: tuple[Topic, ...]  # the datasets, the sources' dead letters and the platform's control topics


def find_catalog(jobs: Mapping[str, JobSpec] | None = None, module: str = "jobs.catalog") -> Catalog:
    """Every topic a job reads (inputs and lookups) or writes, and every `Topic` that `module` defines at its top
    level (a dataset that no job reads yet; the module may be absent). A topic declared twice must be declared
    alike. A topic's own folder of declarations is the job's: a new source declared in a job's folder is found
    because the job reads it."""
    jobs = discover() if jobs is None else jobs
    declared: list[Topic] = []
    try:
        catalog = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
    else:
        declared += [value for value in vars(catalog).values() if isinstance(value, Topic)]
    for job in jobs.values():
        output = output_of(job.output).topic
        declared += [*job.inputs, *job.lookups, *([output] if output is not None else [])]
    by_name: dict[str, Topic] = {}
    for topic in declared:
        seen = by_name.setdefault(topic.name, topic)
        if seen != topic:
            raise KappaError(
                f"topic {topic.name} is declared twice, differently: declare it once and import it where it is used"
            )
    datasets = tuple(sorted(by_name.values(), key=lambda t: t.name))
    written = set(writers_of(jobs.values()))
    sources = tuple(t for t in datasets if t.name not in written)
    return Catalog(datasets, sources, datasets + tuple(dead_letters_of(t) for t in sources) + CONTROL_TOPICS)


def load_catalog(module: str = "jobs.catalog") -> tuple[Topic, ...]:
    """Every topic of the platform (`find_catalog(...).topics`), for the commands that create and register them."""
    return find_catalog(module=module).topics
