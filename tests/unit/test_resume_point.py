"""Resume point parsing and validation: every problem reported at once, each naming its
entry; compatibility by name, kind, key and value schema (field names included)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkpoint.aggregates import AggregateState, BufferColumn
from sparkpoint.errors import ValidationError
from sparkpoint.snapshot.manifest import Manifest, OperatorEntry, SourceEntry, StoreEntry
from sparkpoint.upgrade.resume_point import ResumePoint, load_resume_point, parse_resume_point
from sparkpoint.upgrade.validate import (
    JobShape,
    NewOperator,
    NewSource,
    NewStore,
    default_resume_point,
    validate,
)


def _struct(*fields: tuple[str, str]) -> dict[str, Any]:
    return {"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}


DEDUP_KEY = _struct(("event_id", "string"), ("ts", "timestamp"))
DUMMY = _struct(("__dummy__", "void"))
AGG_KEY = _struct(("user", "string"))
COUNT = _struct(("count", "long"))


def _op(name: str, op_id: int, spark: str, key: dict[str, Any], value: dict[str, Any],
        partitions: int = 2) -> OperatorEntry:
    return OperatorEntry(name=name, operator_id=op_id, kind=spark, spark_operator_name=spark,
                         stores=[StoreEntry(name="default", key_schema=key, value_schema=value)],
                         partitions=partitions, rows=5, bytes=100)


def _manifest(name: str, operators: list[OperatorEntry], sources: list[str]) -> Manifest:
    return Manifest(name=name, job="j", created_at="2026-01-01T00:00:00Z", batch_id=3,
                    spark_version="4.3.0", state_store_provider="p", shuffle_partitions=2,
                    query_id="q", watermark_ms=0, job_file=None, params={},
                    sources=[SourceEntry(name=s, offset={"logOffset": 1}) for s in sources],
                    operators=operators, files=[], total_bytes=0)


def _new(name: str, op_id: int, spark: str, key: dict[str, Any], value: dict[str, Any],
         named: bool = True) -> NewOperator:
    return NewOperator(name, op_id, spark, (NewStore("default", key, value),), named)


S1 = _manifest("s1", [_op("counts", 0, "stateStoreSave", AGG_KEY, COUNT),
                      _op("dedup", 1, "dedupe", DEDUP_KEY, DUMMY)], ["clicks"])
V1 = JobShape((NewSource("clicks"),), (_new("counts", 0, "stateStoreSave", AGG_KEY, COUNT),
                                       _new("dedup", 1, "dedupe", DEDUP_KEY, DUMMY)), 2)


def test_default_resume_point_of_an_unchanged_job_is_valid() -> None:
    rp = default_resume_point(V1, "s1", S1)
    plan = validate(V1, rp, {"s1": S1})
    assert plan.ok, plan.problems
    assert [(o.name, o.action) for o in plan.operators] == [("counts", "resume"),
                                                            ("dedup", "resume")]
    assert [(s.name, s.action, s.offset) for s in plan.sources] == [
        ("clicks", "resume", {"logOffset": 1})]


def test_inserted_operator_initializes_and_ids_may_move() -> None:
    job = JobShape((NewSource("clicks"),), (
        _new("counts", 0, "stateStoreSave", AGG_KEY, COUNT),
        _new("dedup_urls", 1, "dedupe", _struct(("url", "string")), DUMMY),
        _new("dedup", 2, "dedupe", DEDUP_KEY, DUMMY)), 2)
    plan = validate(job, default_resume_point(job, "s1", S1), {"s1": S1})
    assert plan.ok, plan.problems
    actions = {o.name: (o.action, o.operator_id) for o in plan.operators}
    assert actions == {"counts": ("resume", 0), "dedup_urls": ("initialize", 1),
                       "dedup": ("resume", 2)}


def test_removed_operator_needs_drop() -> None:
    job = JobShape((NewSource("clicks"),), (_new("counts", 0, "stateStoreSave", AGG_KEY, COUNT),))
    rp = default_resume_point(job, "s1", S1)
    plan = validate(job, rp, {"s1": S1})
    assert not plan.ok
    assert any("'dedup'" in p and "neither resumed nor dropped" in p for p in plan.problems)
    with_drop = ResumePoint.model_validate({**rp.to_dict(),
                                            "drop": [{"snapshot": "s1", "operator": "dedup"}]})
    plan = validate(job, with_drop, {"s1": S1})
    assert plan.ok, plan.problems
    assert ("dedup", "drop") in [(o.name, o.action) for o in plan.operators]


def test_rename_resumes_from_the_old_name() -> None:
    job = JobShape((NewSource("clicks"),), (
        _new("hourly", 0, "stateStoreSave", AGG_KEY, COUNT),
        _new("dedup", 1, "dedupe", DEDUP_KEY, DUMMY)), 2)
    rp = parse_resume_point({"version": 1,
                             "sources": {"clicks": {"mode": "resume", "snapshot": "s1"}},
                             "state": {"hourly": {"mode": "resume", "snapshot": "s1",
                                                  "operator": "counts"},
                                       "dedup": {"mode": "resume", "snapshot": "s1"}}}, "rp")
    plan = validate(job, rp, {"s1": S1})
    assert plan.ok, plan.problems
    assert plan.operators[0].origin == {"snapshot": "s1", "operator": "counts"}


def test_every_problem_is_reported_at_once_naming_its_entry() -> None:
    job = JobShape((NewSource("clicks"), NewSource("views")), (
        _new("counts", 0, "dedupe", AGG_KEY, DUMMY),                      # kind changed
        _new("dedup", 1, "dedupe", _struct(("event_id", "long"), ("ts", "timestamp")), DUMMY),
        _new("fresh", 2, "dedupe", DEDUP_KEY, DUMMY)))                    # no entry
    rp = parse_resume_point({
        "version": 1,
        "sources": {"clicks": {"mode": "resume", "snapshot": "s1", "source": "nope"},
                    "ghost": {"mode": "initialize"}},
        "state": {"counts": {"mode": "resume", "snapshot": "s1"},
                  "dedup": {"mode": "resume", "snapshot": "s1"},
                  "other": {"mode": "resume", "snapshot": "s9"}},
    }, "rp")
    plan = validate(job, rp, {"s1": S1, "s9": None})
    text = "\n".join(plan.problems)
    for fragment in ["sources.clicks: snapshot 's1' has no source 'nope'",
                     "sources.views:", "sources.ghost: the job has no source",
                     "state.counts: cannot resume from s1/counts: operator kind changed",
                     "state.dedup: cannot resume from s1/dedup: key schema changed",
                     "state.fresh:", "state.other: the job has no stateful operator",
                     "snapshot 's9' does not exist"]:
        assert fragment in text, (fragment, text)


def test_changed_aggregate_is_a_value_schema_change() -> None:
    job = JobShape((NewSource("clicks"),), (
        _new("counts", 0, "stateStoreSave", AGG_KEY, _struct(("sum", "double"))),
        _new("dedup", 1, "dedupe", DEDUP_KEY, DUMMY)), 2)
    plan = validate(job, default_resume_point(job, "s1", S1), {"s1": S1})
    assert any("value schema changed" in p for p in plan.problems)


def test_an_aggregate_added_to_a_snapshot_that_does_not_record_its_own_says_what_to_do(
) -> None:
    count = AggregateState(function="count(1)", initial=("0L",),
                           buffer=(BufferColumn(name="count", type="long"),))
    total = AggregateState(function="sum(n)", initial=("CAST(NULL AS BIGINT)",),
                           buffer=(BufferColumn(name="sum", type="long"),))
    grown = dataclasses.replace(_new("counts", 0, "stateStoreSave", AGG_KEY,
                                     _struct(("count", "long"), ("sum", "long"))),
                                aggregates=(count, total))
    job = JobShape((NewSource("clicks"),), (grown, _new("dedup", 1, "dedupe", DEDUP_KEY,
                                                        DUMMY)), 2)
    plan = validate(job, default_resume_point(job, "s1", S1), {"s1": S1})
    assert any("value schema changed" in p and "snapshot the old job again" in p
               for p in plan.problems), plan.problems
    # Recorded in the snapshot, the same change is migrated.
    recorded = S1.model_copy(update={"operators": [
        S1.operators[0].model_copy(update={"aggregates": (count,)}), S1.operators[1]]})
    plan = validate(job, default_resume_point(job, "s1", recorded), {"s1": recorded})
    assert plan.ok, plan.problems
    assert [row.shown_action for row in plan.operators] == ["migrate", "resume"]


def test_field_names_matter_for_same_typed_keys() -> None:
    # Two same-typed dedupes swap places: Spark would accept either state; names decide.
    s = _manifest("s", [_op("by_user", 0, "dedupe", _struct(("user", "string")), DUMMY),
                        _op("by_url", 1, "dedupe", _struct(("url", "string")), DUMMY)], ["c"])
    swapped = JobShape((NewSource("c"),), (
        _new("by_url", 0, "dedupe", _struct(("url", "string")), DUMMY),
        _new("by_user", 1, "dedupe", _struct(("user", "string")), DUMMY)), 2)
    plan = validate(swapped, default_resume_point(swapped, "s", s), {"s": s})
    assert plan.ok
    assert {o.name: o.origin["operator"] for o in plan.operators if o.origin} == {
        "by_url": "by_url", "by_user": "by_user"}
    # Resuming by_user's state into an operator keyed by url is refused by field name.
    rp = parse_resume_point({"version": 1, "sources": {"c": {"mode": "resume", "snapshot": "s"}},
                             "state": {"by_url": {"mode": "resume", "snapshot": "s",
                                                  "operator": "by_user"},
                                       "by_user": {"mode": "resume", "snapshot": "s",
                                                   "operator": "by_url"}}}, "rp")
    assert sum("key schema changed" in p for p in validate(swapped, rp, {"s": s}).problems) == 2


def test_one_state_resumed_twice_is_refused() -> None:
    job = JobShape((NewSource("clicks"),), (
        _new("a", 0, "dedupe", DEDUP_KEY, DUMMY), _new("b", 1, "dedupe", DEDUP_KEY, DUMMY)))
    rp = parse_resume_point({"version": 1,
                             "sources": {"clicks": {"mode": "resume", "snapshot": "s1"}},
                             "state": {"a": {"mode": "resume", "snapshot": "s1",
                                             "operator": "dedup"},
                                       "b": {"mode": "resume", "snapshot": "s1",
                                             "operator": "dedup"}},
                             "drop": [{"snapshot": "s1", "operator": "counts"}]}, "rp")
    assert any("resumed by 2 operators" in p for p in validate(job, rp, {"s1": S1}).problems)


def test_partition_change_is_not_a_problem() -> None:
    job = JobShape(V1.sources, V1.operators, partitions=4)
    plan = validate(job, default_resume_point(job, "s1", S1), {"s1": S1})
    assert plan.ok
    assert all(o.repartition == (2, 4) for o in plan.operators)


def test_unnamed_operators_and_sources_are_warnings() -> None:
    job = JobShape((NewSource("0", named_by_user=False),),
                   (_new("dedupe(event_id,ts)", 0, "dedupe", DEDUP_KEY, DUMMY, named=False),))
    plan = validate(job, default_resume_point(job, "s1", S1), {"s1": S1})
    assert len(plan.warnings) == 2


def test_duplicate_keys_in_a_file_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "rp.yaml"
    path.write_text("version: 1\nstate:\n  a: {mode: initialize}\n  a: {mode: initialize}\n")
    with pytest.raises(ValidationError, match="'a' has two entries"):
        load_resume_point(path)
    path = tmp_path / "rp.json"
    path.write_text('{"version": 1, "state": {"a": {"mode": "initialize"}, '
                    '"a": {"mode": "initialize"}}}')
    with pytest.raises(ValidationError, match="'a' has two entries"):
        load_resume_point(path)


def test_parse_errors_name_every_entry() -> None:
    with pytest.raises(ValidationError) as info:
        parse_resume_point({"version": 1,
                            "sources": {"c": {"mode": "resum", "snapshot": "s"}},
                            "state": {"a": {"mode": "resume"}, "b": {"mode": "initialize",
                                                                       "x": 1}}}, "rp.yaml")
    lines = info.value.message.splitlines()
    assert lines == ["rp.yaml: 3 problems in the resume point:",
                     "  sources.c.mode: 'resum' is not one of resume, initialize",
                     "  state.a.snapshot: required but missing",
                     "  state.b.x: unknown key; expected one of mode"]
    assert info.value.details["problems"] == [line.strip() for line in lines[1:]]
    with pytest.raises(ValidationError, match="version: 1"):
        parse_resume_point({"version": 2}, "rp.yaml")


_names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
_source = st.one_of(
    st.fixed_dictionaries({"mode": st.just("resume"), "snapshot": _names, "source": _names}),
    st.fixed_dictionaries({"mode": st.just("initialize"),
                           "start": st.one_of(st.sampled_from(["earliest", "latest"]),
                                              st.fixed_dictionaries({"timestamp": _names}))}))
_state = st.one_of(
    st.fixed_dictionaries({"mode": st.just("resume"), "snapshot": _names, "operator": _names}),
    st.fixed_dictionaries({"mode": st.just("initialize")}))


@given(st.dictionaries(_names, _source, max_size=3), st.dictionaries(_names, _state, max_size=3),
       st.lists(st.fixed_dictionaries({"snapshot": _names, "operator": _names}), max_size=2))
def test_resume_point_round_trips_through_yaml(sources: dict[str, Any], state: dict[str, Any],
                                               drop: list[dict[str, str]]) -> None:
    import yaml

    rp = parse_resume_point({"version": 1, "sources": sources, "state": state, "drop": drop}, "x")
    again = parse_resume_point(yaml.safe_load(rp.to_yaml()), "x")
    assert again == rp
