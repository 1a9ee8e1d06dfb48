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
(what exists in the job and in the snapshots is the validator's business).
"""

from __future__ import annotations

import datetime as dt
import json
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


START_FORMS = "earliest, latest, {timestamp: ISO 8601 time} or {offset: ...}"


class ResumeSource(_Strict):
    mode: Literal["resume"]
    snapshot: SnapshotName
    source: SourceName | None = Field(default=None,
                                      description="name in the snapshot (default: same)")


class InitializeSource(_Strict):
    mode: Literal["initialize"]
    start: StartPosition = "earliest"

    @field_validator("start", mode="before")
    @classmethod
    def _one_start_form(cls, value: Any) -> Any:
        """One readable message instead of one per member of the union."""
        if value in ("earliest", "latest") or isinstance(value, BaseModel):
            return value
        if isinstance(value, dict) and len(value) == 1:
            ((key, inner),) = value.items()
            if key == "offset":
                return value
            if key == "timestamp" and isinstance(inner, str | dt.date):
                return value
        shown = repr(value) if not isinstance(value, dict) else \
            "{" + ", ".join(f"{_shown(str(k))}: {v!r}" for k, v in value.items()) + "}"
        if len(shown) > 200:
            shown = shown[:200] + "..."
        raise ValueError(f"expected {START_FORMS}, found {shown}")


class ResumeState(_Strict):
    mode: Literal["resume"]
    snapshot: SnapshotName
    operator: OperatorName | None = Field(default=None,
                                          description="name in the snapshot (default: same)")


class InitializeState(_Strict):
    mode: Literal["initialize"]


class DropEntry(_Strict):
    snapshot: SnapshotName
    operator: OperatorName


SourceEntry = Annotated[ResumeSource | InitializeSource, Field(discriminator="mode")]
StateEntry = Annotated[ResumeState | InitializeState, Field(discriminator="mode")]


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

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)


_ADAPTER = TypeAdapter(ResumePoint)


def _shown(part: int | str) -> str:
    """A path part as typed, or quoted when it would break the one-line message."""
    text = str(part)
    return text if text and text.isprintable() and text.strip() == text else repr(text)


def _where(location: tuple[int | str, ...]) -> str:
    # Drop pydantic's union tags ("resume", "initialize", "TimestampStart"...) from paths.
    parts = [_shown(p) for p in location
             if p not in ("resume", "initialize", "TimestampStart", "OffsetStart", "[key]")
             and not str(p).startswith(("literal[", "function-"))]
    return ".".join(parts) or "(top level)"


def parse_resume_point(data: Any, origin: str) -> ResumePoint:
    if not isinstance(data, dict):
        raise ValidationError(
            f"{origin}: expected a mapping with 'version', 'sources', 'state', 'drop', found "
            f"{type(data).__name__}"
        )
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise ValidationError(
            f"{origin}: expected 'version: {FORMAT_VERSION}', found {version!r}; this sparkpoint "
            "reads resume point format version 1"
        )
    try:
        return _ADAPTER.validate_python(data)
    except PydanticValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{_where(tuple(error['loc']))}: {message}")
        unique = list(dict.fromkeys(problems))
        raise ValidationError(
            f"{origin}: {len(unique)} problem(s) in the resume point: " + "; ".join(unique)
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
                f"line {key_node.start_mark.line + 1}: {key!r} has two entries; each source and "
                "operator must have exactly one"
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


def load_resume_point(path: Path) -> ResumePoint:
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
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        # ValueError covers JSON syntax errors and YAML scalars that look like dates but are
        # none (2026-13-45).
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationError(
            f"{path}: expected YAML or JSON, found a syntax error: {first}"
        ) from exc
    return parse_resume_point(data, str(path))
