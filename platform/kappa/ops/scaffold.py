"""`kappa jobs new <name> --input <topic>`: a new job folder and its test, which pass as generated.

The job reads the declared topic and appends its records to a Delta table named after the job (raw_clicks' shape:
the simplest exact job). Its logic is one pure function in `transforms.py`, and `tests/unit/test_<name>.py` runs
that function on a hand-made record of the input's schema: the place to add the cases of the real logic.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kappa.contracts.schema_files import topic_value_schema
from kappa.contracts.topic_declarations import Topic
from kappa.core.errors import KappaError
from kappa.core.settings import KappaSettings
from kappa.runtime.discovery import discover, find_catalog, find_topic

# An Avro type -> (its Spark DDL type, a sample value as Python source).
_SAMPLES: dict[str, tuple[str, str]] = {
    "string": ("STRING", '"a"'),
    "int": ("INT", "1"),
    "long": ("BIGINT", "1"),
    "float": ("FLOAT", "1.5"),
    "double": ("DOUBLE", "1.5"),
    "boolean": ("BOOLEAN", "True"),
}


@dataclass(frozen=True)
class Column:
    name: str
    ddl: str  # its Spark type, as the job sees the decoded field
    sample: str  # a value, as Python source


@dataclass(frozen=True)
class Scaffold:
    files: dict[Path, str]  # path (relative to the project) -> content
    skipped: tuple[str, ...]  # input fields left out of the sample (nested types: add them by hand)


def _column(field: dict[str, Any]) -> Column | None:
    """The field as a column of the sample record; None for nested types (records, arrays, maps, bytes)."""
    avro = field["type"]
    if isinstance(avro, list):  # a nullable field: its other branch
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            return None
        avro = branches[0]
    if isinstance(avro, dict):
        if avro.get("logicalType") in ("timestamp-millis", "timestamp-micros"):
            return Column(field["name"], "TIMESTAMP", "datetime(2026, 1, 1, 12, 0, tzinfo=UTC)")
        if avro.get("type") == "enum":
            return Column(field["name"], "STRING", json.dumps(avro["symbols"][-1]))
        avro = avro.get("type")
    if isinstance(avro, str) and avro in _SAMPLES:
        ddl, sample = _SAMPLES[avro]
        return Column(field["name"], ddl, sample)
    return None


def _import_line(topic: Topic, jobs_package: str) -> str:
    """Where the topic is declared, as an import: the catalog module or a job's declaration."""
    modules = [f"{jobs_package}.catalog"]
    root = importlib.import_module(jobs_package)
    modules += [f"{jobs_package}.{m.name}.declaration" for m in pkgutil.iter_modules(root.__path__) if m.ispkg]
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        for variable, value in vars(module).items():
            if isinstance(value, Topic) and value.name == topic.name and variable.isupper():
                return f"from {name} import {variable}"
    raise KappaError(f"topic {topic.name} is declared nowhere a job can import it from")  # pragma: no cover


def scaffold(settings: KappaSettings, name: str, input_topic: str, jobs_package: str = "jobs") -> Scaffold:
    """The files of a new job `name` reading `input_topic` (a declared topic)."""
    if not name.isidentifier() or name != name.lower():
        raise KappaError(f"job name {name!r}: use lower_case_with_underscores (it names a folder and a table)")
    if name in discover(jobs_package):
        raise KappaError(f"a job {name!r} exists already (jobs/{name})")
    topic = find_topic(input_topic, find_catalog(module=f"{jobs_package}.catalog").datasets)
    fields = topic_value_schema(settings.schemas_path, topic)["fields"]
    columns = [c for c in map(_column, fields) if c is not None]
    skipped = tuple(f["name"] for f in fields if _column(f) is None)
    import_line = _import_line(topic, jobs_package)
    variable = import_line.rsplit(" ", 1)[1]
    own_import = f"from {jobs_package}.{name}.transforms import output_rows"
    imports = "\n".join(sorted([import_line, own_import]))  # as ruff's isort orders them
    names = "\n".join(f"    {json.dumps(c.name)}," for c in columns)
    folder = Path(jobs_package.replace(".", "/")) / name
    files = {
        folder / "__init__.py": "",
        folder / "transforms.py": TRANSFORMS.format(name=name, topic=topic.name, columns=names),
        folder / "declaration.py": DECLARATION.format(name=name, topic=topic.name, imports=imports, variable=variable),
        Path("tests") / "unit" / f"test_{name}.py": TEST.format(
            name=name,
            topic=topic.name,
            package=jobs_package,
            record="\n".join(f"    {json.dumps(c.name)}: {c.sample}," for c in columns),
            ddl="\n".join(f'        "{c.name} {c.ddl}",' for c in columns),
        ),
    }
    return Scaffold(files, skipped)


def write(root: Path, made: Scaffold) -> list[Path]:
    """Write the files under `root`; refuses to overwrite any."""
    existing = [p for p in made.files if (root / p).exists()]
    if existing:
        raise KappaError(f"{', '.join(map(str, existing))} exist already: nothing written")
    for path, text in made.files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return list(made.files)


TRANSFORMS = '''"""Pure DataFrame transforms of {name} (no sources, no sinks): what tests/unit/test_{name}.py checks."""

from pyspark.sql import DataFrame

# The table's columns. Shape them to your output.
COLUMNS = (
{columns}
)


def output_rows(records: DataFrame) -> DataFrame:
    """The decoded records of `{topic}` -> the table's rows. Your job's logic goes here."""
    return records.select(*COLUMNS)
'''

DECLARATION = '''"""{name}: `{topic}` -> the Delta table `{name}` (append); undecodable records -> `{topic}.dlq`.

Scaffolded by `kappa jobs new`. The runtime appends each batch's rows at most once per batch id (Delta's idempotent
write), so a batch that runs again after a crash adds nothing twice. docs/job_api.md lists what a declaration can
say (a table upserted or accumulated by its keys: `DeltaTable(keys=..., write=...)`).
"""

from __future__ import annotations

{imports}
from kappa.job import DeltaTable, JobContext, JobSpec, TablePlan

TABLE = DeltaTable("{name}", doc="TODO: what a row of {name} is.")


def plan(ctx: JobContext) -> TablePlan:
    return TablePlan(ctx.read({variable}).rows, batch=output_rows)


JOB = JobSpec(
    name="{name}",
    version=1,
    description="TODO: what {name} computes from {topic}.",
    inputs=({variable},),
    output=TABLE,
    plan=plan,
)
'''

TEST = '''"""{name}'s transforms on a hand-made `{topic}` record (by `kappa jobs new`: add your logic's cases)."""

from datetime import UTC, datetime

from pyspark.sql import SparkSession

from {package}.{name}.transforms import COLUMNS, output_rows

# One `{topic}` record as the job sees it, decoded (and two Kafka columns a decoded record also has).
RECORD = {{
{record}
}}
DDL = ", ".join(
    [
{ddl}
        "kafka_partition INT",
        "kafka_offset BIGINT",
    ]
)


def test_output_rows_are_the_records_columns(spark: SparkSession) -> None:
    records = spark.createDataFrame([{{**RECORD, "kafka_partition": 0, "kafka_offset": 7}}], schema=DDL)
    [row] = output_rows(records).collect()
    # pyspark hands out naive datetimes in the local time zone
    got = {{k: v.astimezone(UTC) if isinstance(v, datetime) else v for k, v in row.asDict().items()}}
    assert got == {{column: RECORD[column] for column in COLUMNS}}
'''
