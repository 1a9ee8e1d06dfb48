"""The resume point file (YAML or JSON): which snapshot state and offsets a new job takes.

```yaml
version: 1
sources:
  clicks:      {mode: resume, snapshot: s1, source: clicks}
  impressions: {mode: initialize, start: earliest}   # or latest, {timestamp: ..}, {offset: ..}
state:
  hourly_counts: {mode: resume, snapshot: s1, operator: hourly_counts}
  dedup_clicks:  {mode: initialize}
drop:
  - {snapshot: s1, operator: legacy_totals}
```

Parsing reports every problem at once, each naming its entry; nothing else is checked here
(what exists in the job and in the snapshots is the validator's business). ``plan`` reads a
resume point with ``read_resume_point``, which keeps the well-formed entries beside the
problems of the others, so that one run reports the file's mistakes and the validator's.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, field_validator
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.errors import ValidationError
from sparkpoint.storage.home import name_problem, operator_name_problem

FORMAT_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _checked(problem: str | None, name: str) -> str:
    if problem is not None:
        raise ValueError(problem)
    return name


# Every name read from the file is checked by the same rules as names on the command line.
SnapshotName = Annotated[str, AfterValidator(lambda n: _checked(name_problem(n, "snapshot"), n))]
SourceName = Annotated[str, AfterValidator(lambda n: _checked(name_problem(n, "source"), n))]
OperatorName = Annotated[str, AfterValidator(lambda n: _checked(operator_name_problem(n), n))]


def _iso_time(value: dt.datetime | dt.date) -> str:
    """YAML reads an unquoted ``2026-01-01T00:00:00Z`` as a datetime: write it back as the
    ISO 8601 text the user typed (zone kept; a zoneless time is refused where it is used)."""
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class TimestampStart(_Strict):
    timestamp: str

    @field_validator("timestamp", mode="before")
    @classmethod
    def _from_yaml_time(cls, value: Any) -> Any:
        return _iso_time(value) if isinstance(value, dt.date) else value


class OffsetStart(_Strict):
    offset: Any


StartPosition = Literal["earliest", "latest"] | TimestampStart | OffsetStart


class ResumeSource(_Strict):
    mode: Literal["resume"]
    snapshot: SnapshotName
    source: SourceName | None = Field(default=None,
                                      description="name in the snapshot (default: same)")


class InitializeSource(_Strict):
    mode: Literal["initialize"]
    start: StartPosition = "earliest"


class ResumeState(_Strict):
    mode: Literal["resume"]
    snapshot: SnapshotName
    operator: OperatorName | None = Field(default=None,
                                          description="name in the snapshot (default: same)")
    set: dict[str, str] | None = Field(
        default=None, description="new state value columns, each a Spark SQL expression over "
        "the old state's key and value columns")


class InitializeState(_Strict):
    mode: Literal["initialize"]


class SeedState(_Strict):
    """An operator whose state is the result of a batch query (its key columns and its state
    value's columns by name, as `plan` lists them), not a snapshot's."""

    mode: Literal["seed"]
    query: str = Field(min_length=1, description="a Spark SQL batch query")


class DropEntry(_Strict):
    snapshot: SnapshotName
    operator: OperatorName


SourceEntry = Annotated[ResumeSource | InitializeSource, Field(discriminator="mode")]
StateEntry = Annotated[ResumeState | InitializeState | SeedState, Field(discriminator="mode")]


class ResumePoint(_Strict):
    version: Literal[1] = 1
    sources: dict[SourceName, SourceEntry] = Field(default_factory=dict)
    state: dict[OperatorName, StateEntry] = Field(default_factory=dict)
    drop: list[DropEntry] = Field(default_factory=list)

    def snapshots(self) -> list[str]:
        """Every snapshot the resume point refers to, in first-mention order."""
        names: list[str] = []
        for entry in [*self.sources.values(), *self.state.values(), *self.drop]:
            snapshot = getattr(entry, "snapshot", None)
            if snapshot is not None and snapshot not in names:
                names.append(snapshot)
        return names

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    def to_yaml(self, omit_empty_drop: bool = False) -> str:
        """``omit_empty_drop``: leave out ``drop: []`` so that a commented drop list
        written below it can be uncommented without making a second ``drop`` key."""
        data = self.to_dict()
        if omit_empty_drop and not data.get("drop"):
            data.pop("drop", None)
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


_ADAPTER = TypeAdapter(ResumePoint)


def flow_mapping(**entries: str) -> str:
    """``{snapshot: s1, operator: 'stateStoreSave(window,word)'}``: a one-line YAML mapping
    that parses when pasted, whatever the names hold (derived operator names have commas
    and parentheses; a snapshot named 123 would otherwise become a number)."""
    text: str = yaml.safe_dump(entries, default_flow_style=True, sort_keys=False,
                               width=2**31 - 1)
    return text.strip()


# Union members pydantic puts into error locations; the user never wrote them.
_ENTRY_MODELS: dict[tuple[str, str], type[BaseModel]] = {
    ("sources", "resume"): ResumeSource,
    ("sources", "initialize"): InitializeSource,
    ("state", "resume"): ResumeState,
    ("state", "initialize"): InitializeState,
}
_START_CHOICES = "earliest, latest, {timestamp: ISO8601} or {offset: ...}"


def _part_text(part: object) -> str:
    """A path part as typed, or quoted when it would break the one-line message."""
    text = str(part)
    return text if text and text.isprintable() and text.strip() == text else repr(text)


def _shown(value: Any) -> str:
    """A value as the user wrote it in YAML terms."""
    if isinstance(value, dict):
        text = yaml.safe_dump(value, default_flow_style=True, width=2**31 - 1).strip()
        # A key YAML cannot write on one line (a line break in it) is written over several.
        return text if len(text) <= 80 and text.isprintable() else "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing"
    text = repr(value) if isinstance(value, str) else str(value)
    # Whatever the file holds, the message stays one short line.
    return text if len(text) <= 80 else text[:77] + "..."


def _entry_path(location: tuple[int | str, ...]) -> tuple[str, type[BaseModel] | None]:
    """The dotted entry path the user wrote (``state.word_counts.mode``, ``drop[0].operator``)
    and the model of the innermost entry, for listing the keys it takes."""
    path = ""
    model: type[BaseModel] | None = ResumePoint
    section = ""
    for depth, part in enumerate(location):
        if depth == 0:
            section = str(part)
            if len(location) > 1:
                model = DropEntry if section == "drop" else None
        if depth == 2 and section in ("sources", "state") and (section, part) in _ENTRY_MODELS:
            model = _ENTRY_MODELS[(section, str(part))]
            continue
        if part == "[key]":
            continue  # pydantic's marker for a problem with the key itself
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{_part_text(part)}" if path else _part_text(part)
    return path or "(top level)", model


def _problem(error: Any) -> str:
    """One pydantic error in the user's terms."""
    kind = error["type"]
    path, model = _entry_path(tuple(error["loc"]))
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "union_tag_invalid":
        expected = ctx.get("expected_tags", "").replace("'", "")
        return f"{path}.mode: {ctx.get('tag')!r} is not one of {expected}"
    if kind == "union_tag_not_found":
        if path.startswith("state."):
            return f"{path}: no mode; expected mode: resume, initialize or seed"
        return f"{path}: no mode; expected mode: resume or mode: initialize"
    if kind == "missing":
        return f"{path}: required but missing"
    if kind == "extra_forbidden":
        keys = ", ".join(model.model_fields) if model is not None else ""
        known = f"; expected one of {keys}" if keys else ""
        return f"{path}: unknown key{known}"
    if kind == "string_type":
        return f"{path}: expected text, found {_shown(value)} (put it in quotes)"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"{path}: expected a mapping, found {_shown(value)}"
    if kind == "list_type":
        return f"{path}: expected a list, found {_shown(value)}"
    if kind == "literal_error":
        expected = ctx.get("expected", "").replace("'", "").replace(" or ", ", ")
        return f"{path}: {_shown(value)} is not one of {expected}"
    return f"{path}: {error['msg'].removeprefix('Value error, ')}"


def _start_problems(path: str, value: Any, errors: list[Any]) -> list[str]:
    """A wrong ``start`` fails every way of writing one; report the way the user meant
    (the one whose key they wrote), else the choices."""
    members = {"timestamp": "TimestampStart", "offset": "OffsetStart"}
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in members:
        member = members[next(iter(value))]
        return [_problem({**error, "loc": tuple(p for p in error["loc"] if p != member)})
                for error in errors if member in error["loc"]]
    return [f"{path}: expected {_START_CHOICES}, found {_shown(value)}"]


def _problems(errors: list[Any]) -> list[str]:
    """Every problem once, in the order of the file."""
    problems: list[str] = []
    starts: dict[tuple[Any, ...], list[Any]] = {}
    for error in errors:
        location = tuple(error["loc"])
        if location[0] == "sources" and "start" in location:
            prefix = location[: location.index("start") + 1]
            if prefix not in starts:
                starts[prefix] = []
                problems.append(f"\0{len(starts) - 1}")  # placeholder keeps the order
            starts[prefix].append(error)
            continue
        problems.append(_problem(error))
    expanded: list[str] = []
    groups = list(starts.items())
    for problem in problems:
        if problem.startswith("\0"):
            prefix, group = groups[int(problem[1:])]
            # The error nearest to ``start`` (on it, or one per way of writing it) holds its
            # value.
            value = min(group, key=lambda e: len(e["loc"])).get("input")
            expanded.extend(_start_problems(_entry_path(prefix)[0], value, group))
        else:
            expanded.append(problem)
    return list(dict.fromkeys(expanded))


@dataclass(frozen=True)
class ReadResumePoint:
    """A resume point as far as it is well-formed: ``point`` holds the entries that parsed,
    ``problems`` one line per entry that did not, ``broken`` those entries' paths
    (``sources.NAME``, ``state.NAME``): the validator must not call them missing too."""

    point: ResumePoint
    problems: tuple[str, ...] = ()
    broken: frozenset[str] = frozenset()


def _salvaged(data: dict[str, Any], errors: list[Any]) -> tuple[dict[str, Any], set[str]]:
    """``data`` without the entries (or sections) that pydantic's ``errors`` point into."""
    kept = {key: value for key, value in data.items()}
    broken: set[str] = set()
    bad_drops: set[int] = set()
    for error in errors:
        location = tuple(error["loc"])
        section = location[0] if location else None
        if section in ("sources", "state") and len(location) >= 2 and \
                isinstance(kept.get(section), dict):
            name = location[1]
            if name in kept[section]:
                kept[section] = {k: v for k, v in kept[section].items() if k != name}
            broken.add(f"{section}.{name}")
        elif section == "drop" and len(location) >= 2 and isinstance(location[1], int):
            bad_drops.add(location[1])
            broken.add("drop")
        elif isinstance(section, str):
            kept.pop(section, None)
            if section in ("sources", "state", "drop"):
                broken.add(section)
    if bad_drops and isinstance(kept.get("drop"), list):
        kept["drop"] = [d for i, d in enumerate(kept["drop"]) if i not in bad_drops]
    return kept, broken


def read_resume_point(path: Path) -> ReadResumePoint:
    """Load a resume point, keeping every well-formed entry; a file that cannot be read at all
    (syntax, version) still raises, as there is nothing to check the job against."""
    data = _load_data(path)
    origin = str(path)
    _check_top_level(data, origin)
    try:
        return ReadResumePoint(_ADAPTER.validate_python(data))
    except PydanticValidationError as exc:
        problems = tuple(f"{origin}: {problem}" for problem in _problems(exc.errors()))
        kept, broken = _salvaged(data, exc.errors())
    try:
        point = _ADAPTER.validate_python(kept)
    except PydanticValidationError:
        # What is left still fails (a shape not foreseen above): check nothing more.
        point, broken = ResumePoint(), broken | {"sources", "state", "drop"}
    return ReadResumePoint(point, problems, frozenset(broken))


def _check_top_level(data: Any, origin: str) -> None:
    if not isinstance(data, dict):
        raise ValidationError(
            f"{origin}: expected a mapping with 'version', 'sources', 'state', 'drop', found "
            f"{_shown(data)}"
        )
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise ValidationError(
            f"{origin}: expected 'version: {FORMAT_VERSION}', found {version!r}; this sparkpoint "
            "reads resume point format version 1"
        )


def parse_resume_point(data: Any, origin: str) -> ResumePoint:
    _check_top_level(data, origin)
    try:
        return _ADAPTER.validate_python(data)
    except PydanticValidationError as exc:
        problems = _problems(exc.errors())
        if len(problems) == 1:
            raise ValidationError(f"{origin}: {problems[0]}", problems=problems) from exc
        # One line per problem: each names its entry, and all are fixed in one pass.
        raise ValidationError(
            f"{origin}: {len(problems)} problems in the resume point:\n  "
            + "\n  ".join(problems), problems=problems,
        ) from exc


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; two entries for one name must be refused."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str | int | float | bool | dt.date) and key is not None:
            raise ValidationError(
                f"line {key_node.start_mark.line + 1}: expected a name as key, found "
                f"{type(key).__name__}")
        if key in seen:
            raise ValidationError(
                f"line {key_node.start_mark.line + 1}, column {key_node.start_mark.column + 1}: "
                f"{_part_text(key)!r} has two entries; each source and operator must have "
                "exactly one"
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _reject_duplicate_json_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise ValidationError(
                f"{key!r} has two entries; each source and operator must have exactly one"
            )
    return dict(pairs)


def _syntax_error(path: Path, exc: json.JSONDecodeError | yaml.YAMLError) -> ValidationError:
    """A syntax error with its line and column (1-based), as editors count them."""
    if isinstance(exc, json.JSONDecodeError):
        line, column, problem = exc.lineno, exc.colno, exc.msg
    else:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        if context:
            problem = f"{problem} ({context})"
        if mark is None:
            return ValidationError(f"{path}: expected YAML or JSON, found a syntax error: "
                                   f"{problem}")
        line, column = mark.line + 1, mark.column + 1
    kind = "JSON" if path.suffix == ".json" else "YAML"
    return ValidationError(
        f"{path} line {line}, column {column}: expected {kind}, found a syntax error: {problem}",
        line=line, column=column,
    )


def load_resume_point(path: Path) -> ResumePoint:
    return parse_resume_point(_load_data(path), str(path))


def _load_data(path: Path) -> Any:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError as exc:
        raise ValidationError(f"{path}: resume point file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(
            f"{path}: expected a readable UTF-8 resume point file, found {exc}") from exc
    try:
        if path.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_reject_duplicate_json_keys)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
    except ValidationError as exc:
        raise ValidationError(f"{path}: {exc.message}") from exc
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise _syntax_error(path, exc) from exc
    except (ValueError, TypeError, RecursionError) as exc:
        # YAML scalars that look like dates but are none (2026-13-45), keys PyYAML cannot
        # hash, nesting too deep to read.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationError(
            f"{path}: expected YAML or JSON, found content it cannot read: {first}"
        ) from exc
    return data
