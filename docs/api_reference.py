"""Generate docs/job_api.md, the reference page of the job API, from the code's docstrings and field comments.

    uv run --frozen python docs/api_reference.py           # rewrite docs/job_api.md (`make docs`)
    uv run --frozen python docs/api_reference.py --check   # exit 1 if it differs from what would be generated

Each fact has one place, the code: a class's or function's docstring; a dataclass field's or constant's comment
(at the end of its line, or the comment lines right above it: `inspect` cannot see comments, so they are read from
`inspect.getsource` with `tokenize` and `ast`); a setting's type, default and description as pydantic exposes them.
`make lint` runs `--check` and tests/unit/test_api_reference.py compares the page with the output, so a docstring
changed without `make docs` fails CI instead of leaving the page stale.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic_core import PydanticUndefined

from kappa import job as job_module
from kappa.contracts import topic_declarations
from kappa.contracts.compatibility import Compatibility
from kappa.contracts.topic_declarations import Cleanup, Topic, dead_letters_of, late_events_of
from kappa.core import settings as settings_module
from kappa.core.settings import KappaSettings
from kappa.kafka import partitioning
from kappa.kafka.partitioning import partition_column, partition_for
from kappa.operators import python_rule
from kappa.operators.python_rule import KeyedRule, keyed_rule
from kappa.runtime import declaration
from kappa.runtime.declaration import (
    JobContext,
    JobPlan,
    JobSpec,
    NoSettings,
    RealTimePlan,
    Starting,
    TablePlan,
    TopicPlan,
)
from kappa.runtime.outputs import DeltaTable, TableWrite
from kappa.spark import changes, compacted, delta_merge, side_outputs, topic_io
from kappa.spark.changes import changes_with_key, last_per_key
from kappa.spark.compacted import latest_per_key
from kappa.spark.delta_merge import DeltaMerge, MergeMode, append_once
from kappa.spark.topic_io import DecodedTopic

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "job_api.md"
CHECK_MESSAGE = "docs/job_api.md is out of date with the code's docstrings: run `make docs`"

# Comments that speak to tools, not readers.
_PRAGMA = re.compile(r"^(fmt:|type:|noqa|pragma|pyright:)")
_DIVIDER = re.compile(r"^-{3}\s*(?P<title>.*?)\s*-*$")  # `# --- where things live -----`: a section of a class
_WRAP_AT = 100  # a signature longer than this is written one parameter a line


# --- reading the source -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Statement:
    """One assignment of a class body or a module, with the comments that explain it."""

    name: str
    doc: str  # the comment lines right above it, then the comment at the end of its line
    default_source: str | None  # the assigned expression as written (`FOREVER`), None without one
    section: str  # the title of the last `# --- title ---` divider above it ("" before any)


def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line number -> (comment text, alone on its line), for every comment of `source`."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            alone = not token.line[: token.start[1]].strip()
            found[token.start[0]] = (text, alone)
    return found


def _statements(source: str, body: Iterable[ast.stmt]) -> dict[str, _Statement]:
    """The assignments of `body` (statements of `source`) by the name they assign, with their comments."""
    comments = _comments(source)
    dividers = sorted((line, m["title"]) for line, (text, _) in comments.items() if (m := _DIVIDER.match(text)))
    found = {}
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        else:
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and comments[line][1] and not _DIVIDER.match(comments[line][0]):
            above.insert(0, comments[line][0])
            line -= 1
        trailing = comments.get(node.end_lineno or node.lineno)
        parts = [*above, *([trailing[0]] if trailing and not trailing[1] else [])]
        doc = " ".join(p for p in parts if not _PRAGMA.match(p))
        section = next((title for at, title in reversed(dividers) if at < node.lineno), "")
        shown = ast.get_source_segment(source, value) if value is not None else None
        found[name] = _Statement(name, doc, shown, section)
    return found


def _class_source(cls: type) -> tuple[str, ast.ClassDef]:
    source = inspect.getsource(cls)
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef), cls
    return source, node


def class_statements(cls: type) -> dict[str, _Statement]:
    """The fields (and enum members) of a class, with the comments that explain them."""
    source, node = _class_source(cls)
    return _statements(source, node.body)


def module_statements(module: ModuleType) -> dict[str, _Statement]:
    """The module-level constants of a module, with the comments that explain them."""
    source = inspect.getsource(module)
    return _statements(source, ast.parse(source).body)


def class_doc(cls: type) -> str:
    """The class's own docstring as written (not the signature dataclasses write when there is none)."""
    _, node = _class_source(cls)
    return ast.get_docstring(node) or ""


def field_docs(cls: type) -> dict[str, str]:
    """A dataclass's fields -> their explanation (the field's comment)."""
    statements = class_statements(cls)
    return {f.name: statements[f.name].doc if f.name in statements else "" for f in dataclasses.fields(cls)}


# --- writing markdown --------------------------------------------------------------------------------------------


def _prose(text: str) -> str:
    """Docstring text as markdown: `<name>` outside code spans would be an HTML tag, so its `<` is escaped."""
    parts = re.split(r"(`[^`\n]*`)", text)
    return "".join(p if p.startswith("`") else re.sub(r"<(?=[A-Za-z/!?])", r"\<", p) for p in parts)


def _cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped (also inside code spans, as GitHub's tables need)."""
    return _prose(" ".join(text.split())).replace("|", r"\|")


def _code(text: str) -> str:
    return f"`{text}`" if text else "empty"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _docstring(obj: Any) -> str:
    doc = obj.__doc__ if isinstance(obj.__doc__, str) else ""
    return _prose(inspect.cleandoc(doc)) if doc else ""


def _import_line(obj: Any, name: str) -> str:
    """How a job imports `obj`: from the package when its `__init__` exports it (kappa.runtime), else its module."""
    module: str = obj.__module__
    package = module.rpartition(".")[0]
    if package and name in getattr(sys.modules.get(package), "__all__", ()):
        module = package
    return f"`from {module} import {name}`"


class _Shown(str):
    """An annotation as written in the source (a string, with `from __future__ import annotations`), unquoted."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _annotation(annotation: Any) -> Any:
    if annotation is inspect.Parameter.empty:
        return annotation
    return _Shown(annotation if isinstance(annotation, str) else inspect.formatannotation(annotation))


def signature(func: Callable[..., Any], name: str, drop_first: bool = False) -> str:
    """`name(params) -> returns`, annotations as written; one parameter a line when it is long."""
    sig = inspect.signature(func)
    params = [p.replace(annotation=_annotation(p.annotation)) for p in sig.parameters.values()]
    sig = sig.replace(
        parameters=params[1:] if drop_first else params, return_annotation=_annotation(sig.return_annotation)
    )
    text = f"{name}{sig}"
    if len(text) <= _WRAP_AT:
        return text
    shown = [str(p) for p in sig.parameters.values()]
    # the bare `*` of keyword-only parameters
    kinds = [p.kind for p in sig.parameters.values()]
    if inspect.Parameter.KEYWORD_ONLY in kinds:
        shown.insert(kinds.index(inspect.Parameter.KEYWORD_ONLY), "*")
    returns = "" if sig.return_annotation is inspect.Signature.empty else f" -> {sig.return_annotation}"
    return f"{name}(\n" + "".join(f"    {p},\n" for p in shown) + f"){returns}"


def _value(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def _dataclass_default(field: dataclasses.Field[Any], statement: _Statement | None) -> str:
    if field.default is not dataclasses.MISSING:
        shown = _value(field.default)
        written = statement.default_source if statement else None
        if written and written.isidentifier() and written != shown:  # a named constant: `FOREVER` (-1)
            return f"{_code(written)} ({_code(shown)})"
        return _code(shown)
    if field.default_factory is not dataclasses.MISSING:
        return _code(_value(field.default_factory()))
    return "required"


# --- what the page shows -----------------------------------------------------------------------------------------


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties a class defines itself, in source order."""
    for name, member in vars(cls).items():
        routine = isinstance(member, (property, classmethod, staticmethod)) or inspect.isfunction(member)
        if routine and not name.startswith("_"):
            yield name, member


def _member(cls: type, name: str, level: str) -> list[str]:
    member = vars(cls)[name]
    title = f"{cls.__name__}.{name}"
    lines = [f"{level} `{title}`", ""]
    if isinstance(member, property):
        assert member.fget is not None
        returns = _annotation(inspect.signature(member.fget).return_annotation)
        shown = f"{name}: {returns}  # a property" if returns is not inspect.Parameter.empty else name
        doc = _docstring(member.fget)
    elif isinstance(member, (classmethod, staticmethod)):
        shown = signature(getattr(cls, name), name)
        doc = _docstring(member.__func__)
    else:
        shown = signature(member, name, drop_first=True)
        doc = _docstring(member)
    lines += ["```python", shown, "```", ""]
    if doc:
        lines += [doc, ""]
    return lines


class Item:
    """One entry of the page."""

    heading: str = ""

    def index(self) -> tuple[str, ...]:
        """The names the page's contents list for this entry."""
        return (self.heading,) if self.heading else ()

    def render(self) -> list[str]:
        raise NotImplementedError


@dataclasses.dataclass
class ModuleDoc(Item):
    """A module's docstring: what a group of entries shares."""

    module: ModuleType

    def render(self) -> list[str]:
        return [f"From `{self.module.__name__}`:", "", _docstring(self.module), ""]


@dataclasses.dataclass
class Class(Item):
    """A class: its docstring, its fields (or enum members) and its public methods and properties."""

    cls: type
    elsewhere: tuple[str, ...] = ()  # members documented under their own heading in another section

    @property
    def heading(self) -> str:
        return self.cls.__name__

    def render(self) -> list[str]:
        lines = [f"### `{self.heading}`", "", _import_line(self.cls, self.cls.__name__), ""]
        doc = class_doc(self.cls)
        if doc:
            lines += [_prose(doc), ""]
        statements = class_statements(self.cls)
        if dataclasses.is_dataclass(self.cls):
            lines += ["| field | type | default | what it is |", "| --- | --- | --- | --- |"]
            for f in dataclasses.fields(self.cls):
                statement = statements.get(f.name)
                row = [
                    _code(f.name),
                    _code(str(f.type)),
                    _dataclass_default(f, statement),
                    statement.doc if statement else "",
                ]
                lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
            lines.append("")
        elif issubclass(self.cls, enum.Enum):
            lines += ["| member | value | what it is |", "| --- | --- | --- |"]
            for member in self.cls:
                statement = statements.get(member.name)
                row = [_code(member.name), _code(repr(member.value)), statement.doc if statement else ""]
                lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
            lines.append("")
        for name, _ in _members(self.cls):
            if name not in self.elsewhere:
                lines += _member(self.cls, name, "####")
        if self.elsewhere:
            links = ", ".join(f"[`{self.heading}.{n}`](#{_anchor(f'{self.heading}.{n}')})" for n in self.elsewhere)
            lines += [f"Also: {links}.", ""]
        return lines


@dataclasses.dataclass
class Member(Item):
    """A method or property of a class, under its own heading."""

    cls: type
    name: str

    @property
    def heading(self) -> str:
        return f"{self.cls.__name__}.{self.name}"

    def render(self) -> list[str]:
        return _member(self.cls, self.name, "###")


@dataclasses.dataclass
class Field(Item):
    """One field of a dataclass, under its own heading."""

    cls: type
    name: str

    @property
    def heading(self) -> str:
        return f"{self.cls.__name__}.{self.name}"

    def render(self) -> list[str]:
        [f] = [f for f in dataclasses.fields(self.cls) if f.name == self.name]
        statement = class_statements(self.cls).get(self.name)
        lines = [f"### `{self.heading}`", "", "```python", f"{self.name}: {f.type}", "```", ""]
        lines += [f"Default: {_dataclass_default(f, statement)}.", ""]
        if statement and statement.doc:
            lines += [_prose(statement.doc), ""]
        return lines


@dataclasses.dataclass
class Function(Item):
    """A function: its signature and docstring."""

    func: Callable[..., Any]

    @property
    def heading(self) -> str:
        return self.func.__name__

    def render(self) -> list[str]:
        name = self.func.__name__
        lines = [f"### `{name}`", "", _import_line(self.func, name), ""]
        lines += ["```python", signature(self.func, name), "```", ""]
        doc = _docstring(self.func)
        return [*lines, doc, ""] if doc else lines


@dataclasses.dataclass
class Constants(Item):
    """Module constants: their values and comments."""

    module: ModuleType
    names: tuple[str, ...]
    title: str

    @property
    def heading(self) -> str:
        return self.title

    def index(self) -> tuple[str, ...]:
        return self.names

    def render(self) -> list[str]:
        statements = module_statements(self.module)
        imports = ", ".join(self.names)
        lines = [f"### {self.title}", "", f"`from {self.module.__name__} import {imports}`", ""]
        for name in self.names:
            value = getattr(self.module, name)
            doc = statements[name].doc if name in statements else ""
            lines.append(f"- `{name} = {_value(value)}`" + (f": {_prose(doc)}" if doc else ""))
        return [*lines, ""]


def _setting_type(name: str, info: Any) -> str:
    """The field's type as written, with the values of an enum and pydantic's constraints."""
    written = inspect.get_annotations(KappaSettings)[name]
    shown = [_code(written)]
    if isinstance(info.annotation, type) and issubclass(info.annotation, enum.Enum):
        shown.append("one of " + ", ".join(_code(m.value) for m in info.annotation))
    for constraint in info.metadata:
        for attribute, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(constraint, attribute, None) is not None:
                shown.append(f"{symbol} {getattr(constraint, attribute)}")
        if getattr(constraint, "pattern", None) is not None:
            shown.append(f"matching {_code(constraint.pattern)}")
    return ", ".join(shown)


def _setting_default(info: Any) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
        if isinstance(value, Path):  # where the checkout and the home folder are differs by machine
            checkout = settings_module.project_root()
            if checkout is not None and value.is_relative_to(checkout):
                return f"{_code(str(value.relative_to(checkout)))} in the checkout"
            if value.is_relative_to(Path.home()):
                return _code(f"~/{value.relative_to(Path.home())}")
        return _code(_value(value))
    value = info.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        return _code(str(value.value))
    if isinstance(value, bool):
        return _code(str(value).lower())
    return _code(str(value))


@dataclasses.dataclass
class Settings(Item):
    """A pydantic settings class: one table row per field, grouped by the class's `# --- ... ---` dividers."""

    cls: type[KappaSettings]

    @property
    def heading(self) -> str:
        return self.cls.__name__

    def render(self) -> list[str]:
        prefix = str(self.cls.model_config.get("env_prefix", ""))
        lines = [f"### `{self.heading}`", "", _import_line(self.cls, self.heading), ""]
        lines += [_prose(class_doc(self.cls)), ""]
        statements = class_statements(self.cls)
        section = None
        for name, info in self.cls.model_fields.items():
            at = statements[name].section if name in statements else ""
            if at != section:
                section = at
                if at:
                    lines += ["", f"#### {at[0].upper()}{at[1:]}", ""]
                lines += ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
            row = [
                _code(f"{prefix}{name.upper()}"),
                _setting_type(name, info),
                _setting_default(info),
                info.description or "",
            ]
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        return [*lines, ""]


@dataclasses.dataclass
class Section:
    title: str
    intro: str
    items: list[Item]


SECTIONS = [
    Section(
        "Declaring a job",
        "A job is one folder `jobs/<name>/`: `declaration.py` holds one `JOB = JobSpec(...)` whose `plan` builds the "
        "job's rows from a `JobContext`; `transforms.py` holds pure DataFrame functions. Read one beside this page: "
        "`jobs/raw_clicks/` (the smallest), `jobs/user_activity/` (a Delta view), `jobs/sessionize/` (a topic, with "
        "settings), `jobs/enrich_clicks_realtime/` (real-time mode, a lookup).",
        [
            ModuleDoc(job_module),
            ModuleDoc(declaration),
            Class(JobSpec, ("settings_as",)),
            Class(JobContext, ("read", "read_lookup")),
            Class(Starting),
        ],
    ),
    Section(
        "Inputs and lookups",
        "A job streams each input with `ctx.read(topic)` and reads each declared lookup whole with "
        "`ctx.read_lookup(topic)`.",
        [
            Member(JobContext, "read"),
            Class(DecodedTopic),
            Constants(topic_io, ("KAFKA_META", "DELETED"), "The columns of `rows`"),
            ModuleDoc(side_outputs),
            Constants(side_outputs, ("SIDE_SCHEMA", "SIDE_COLUMNS", "SIDE_KIND"), "The SIDE columns"),
            Member(JobContext, "read_lookup"),
            ModuleDoc(compacted),
            Function(latest_per_key),
        ],
    ),
    Section(
        "Writing a topic",
        "A job whose output is a `Topic` returns a `TopicPlan` from its `plan`, or a `RealTimePlan` when it declares "
        "`real_time`.",
        [
            Class(TopicPlan),
            Class(RealTimePlan),
            ModuleDoc(partitioning),
            Function(partition_for),
            Function(partition_column),
        ],
    ),
    Section(
        "Writing a Delta table",
        "A job whose output is a `DeltaTable` returns a `TablePlan`: its rows, and what each batch becomes; the "
        "runtime writes them as the table declares (`DeltaTable.write`: append, upsert or accumulate by `keys`), each "
        "batch id at most once. A view that stays exact under updates and late data keeps its groups in the state "
        "store (the platform's operators, `kappa.operators`) and upserts the rows each batch changed, deleting those "
        "flagged `deleted` (`DeltaTable.deletes`). A job that writes its own way returns a `JobPlan`: its `write` "
        "appends (`append_once`) or merges (`DeltaMerge`), each batch id at most once. A version's table is at "
        "`DeltaTable.path` (in a job: `ctx.output_path()`); outside Python, `uv run kappa aliases` prints each live "
        "version's path (the README's Consuming the outputs).",
        [
            Class(TablePlan),
            Class(DeltaTable),
            Class(TableWrite),
            Class(JobPlan),
            ModuleDoc(delta_merge),
            Function(append_once),
            Class(DeltaMerge),
            Class(MergeMode),
            ModuleDoc(changes),
            Function(changes_with_key),
            Function(last_per_key),
        ],
    ),
    Section(
        "Per-key rules in Python",
        "A rule that keeps state per key (per user, per session) runs either as a platform operator in the JVM "
        "(`kappa.operators`: `as_of_join`, `sessions`, `page_stats`, `user_activity`; the Java in "
        "`infra/jvm/operators`, its Python specification in the job's `logic.py`, held equal by a differential "
        "test) or in Python, as a `KeyedRule` run by `keyed_rule`. Python costs a call per key and batch and each "
        "row's trip to a Python worker: with enrich_clicks' rule in Python (`applyInPandasWithState`), a batch at "
        "1,000 clicks/s took 8.0 s and clicks reached `enriched_clicks` at p99 16.5 s; with the JVM operator, "
        "1.6 s and 6.8 s on the same 5 s trigger (the README's Live latency). Write a new rule in Python when its "
        "input is small or its freshness loose (a few keys, minutes rather than seconds); move it to the JVM when "
        "it sits on the live path of a busy topic. Either way its state lives in the job's checkpoint (RocksDB) "
        "and the input's dead letters pass through it.",
        [
            ModuleDoc(python_rule),
            Class(KeyedRule),
            Function(keyed_rule),
        ],
    ),
    Section(
        "Topics",
        "Topics are declared in `jobs/catalog.py`, or in the folder of the job that reads them; `kappa topics apply` "
        "makes the cluster match.",
        [
            ModuleDoc(topic_declarations),
            Class(Topic),
            Class(Cleanup),
            Class(Compatibility),
            Constants(topic_declarations, ("FOREVER", "MINUTE_MS", "HOUR_MS", "DAY_MS"), "Time constants"),
            Function(dead_letters_of),
            Function(late_events_of),
        ],
    ),
    Section(
        "Settings",
        "A job has two kinds of settings: its own knobs, declared in `JobSpec.settings`, and the platform's, "
        "`ctx.settings`.",
        [
            Field(JobSpec, "settings"),
            Class(NoSettings),
            Member(JobSpec, "settings_as"),
            ModuleDoc(settings_module),
            Settings(KappaSettings),
        ],
    ),
]


def render() -> str:
    """The whole page, as docs/job_api.md holds it."""
    lines = [
        "# The job API",
        "",
        "<!-- Generated by docs/api_reference.py from the code's docstrings and comments: edit those, then run "
        "`make docs`. -->",
        "",
        "What a job's code calls, generated from the docstrings and field comments of the code (`make docs`; "
        "`make lint` fails when this page is out of date). How jobs run: the README's Jobs section and "
        "[architecture.md](architecture.md).",
        "",
    ]
    for section in SECTIONS:
        headings = ", ".join(_code(name) for item in section.items for name in item.index())
        lines.append(f"- [{section.title}](#{_anchor(section.title)})" + (f": {headings}" if headings else ""))
    lines.append("")
    for section in SECTIONS:
        lines += [f"## {section.title}", "", _prose(section.intro), ""]
        for item in section.items:
            lines += item.render()
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/job_api.md differs; write nothing")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if not TARGET.is_file() or TARGET.read_text(encoding="utf-8") != page:
            print(CHECK_MESSAGE, file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(page, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
