"""Find the jobs: every package under jobs/ with a `declaration` module that defines `JOB`."""

from __future__ import annotations

import importlib
import pkgutil

from kappa.errors import KappaError
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
