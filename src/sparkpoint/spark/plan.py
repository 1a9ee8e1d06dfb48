"""What a job's query will look like, learned from Spark's own planner without running it.

Spark assigns stateful operator ids top-down from the sink while planning; the explain path
(``queryExecutionForExplain``) runs the same rules, so its ids are the ids the query uses.
Named frames (``ctx.stateful``) are matched to operators of the whole plan by a signature:
operator kind, key columns, the source attributes beneath it (their exprIds are stable across
plans built from the same sources) and the stateful operators beneath it. Output exprIds are
not usable: planning the whole query re-creates derived attributes (``window``) and prunes
columns below dedupes.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkpoint.aggregates import AggregateState, BufferColumn
from sparkpoint.errors import JobFileError
from sparkpoint.spark.declarations import StatefulDeclaration
from sparkpoint.spark.jvm import scala_list
from sparkpoint.windows import NO_WINDOW, WindowSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlannedOperator:
    operator_id: int
    spark_operator_name: str
    name: str
    named_by_user: bool
    # None: the operator has a window sparkpoint cannot read (a gap computed per row).
    window: WindowSpec | None = NO_WINDOW
    # An aggregation's functions in the order its state value holds their buffers; None for
    # other operators (and aggregations whose state value is laid out otherwise).
    aggregates: tuple[AggregateState, ...] | None = None


def _children(node: Any) -> list[Any]:
    return scala_list(node.children())


def _stateful_nodes(plan: Any) -> list[Any]:
    """Pre-order walk; a node is stateful when it carries a StatefulOperatorStateInfo.

    Aggregations appear twice (StateStoreSave above StateStoreRestore, same operator id):
    the first one met, the writer, stands for the operator.
    """
    found = []
    seen: set[int] = set()
    stack = [plan]
    while stack:
        node = stack.pop()
        try:
            info = node.stateInfo()
        except Exception:  # py4j raises when the node has no such method
            info = None
        if info is not None and info.isDefined():
            operator_id = int(info.get().operatorId())
            if operator_id not in seen:
                seen.add(operator_id)
                found.append(node)
        stack.extend(reversed(_children(node)))
    return found


_KEY_METHODS = ("keyExpressions", "groupingAttributes", "leftKeys", "rightKeys")
_EXPR_ID = re.compile(r"#\d+(-T\d+ms)?")


def _keys(node: Any) -> tuple[str, ...]:
    keys: list[str] = []
    for method in _KEY_METHODS:
        try:
            exprs = scala_list(getattr(node, method)())
        except Exception:  # not every operator has every kind of key
            continue
        keys.extend(_EXPR_ID.sub("", str(expr.toString())) for expr in exprs)
    return tuple(keys)


def _leaf_ids(node: Any) -> tuple[int, ...]:
    ids: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        children = _children(current)
        if not children:
            ids.update(int(attr.exprId().id()) for attr in scala_list(current.output()))
        stack.extend(children)
    return tuple(sorted(ids))


def _signature(node: Any) -> tuple[Any, ...]:
    below = tuple((str(n.shortName()), _keys(n)) for n in _stateful_nodes(node)[1:])
    return (str(node.shortName()), _keys(node), _leaf_ids(node), below)


def _class(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _operator_id(node: Any) -> int | None:
    try:
        info = node.stateInfo()
    except Exception:  # py4j raises when the node has no such method
        return None
    return int(info.get().operatorId()) if info is not None and info.isDefined() else None


def _find_all(expr: Any, kind: str) -> list[Any]:
    """The expressions of class ``kind`` in ``expr``'s tree, pre-order."""
    found = []
    stack = [expr]
    while stack:
        current = stack.pop()
        if _class(current) == kind:
            found.append(current)
        stack.extend(reversed(scala_list(current.children())))
    return found


def _find(expr: Any, kind: str) -> Any | None:
    found = _find_all(expr, kind)
    return found[0] if found else None


def _long_literal(expr: Any) -> int | None:
    if _class(expr) != "Literal" or str(expr.dataType().typeName()) != "long":
        return None
    return int(expr.value())


def _interval_micros(expr: Any) -> int | None:
    """A fixed CalendarInterval literal in microseconds (None: months, or not a literal)."""
    from py4j.java_gateway import get_field

    if _class(expr) != "Literal" or str(expr.dataType().typeName()) != "interval":
        return None
    value = expr.value()
    if int(get_field(value, "months")) != 0:
        return None
    return int(get_field(value, "days")) * 86_400_000_000 + int(get_field(value, "microseconds"))


def _window_of_struct(struct: Any) -> tuple[bool, WindowSpec | None]:
    """Read the window back from the struct Spark's analyzer writes for window() (start =
    ts - (ts - startTime) % slide - k * slide, end = start + duration) and session_window()
    (start = ts, end = ts + gap). (False, None): not such a struct; (True, None): a session
    window whose gap is computed per row."""
    start, end = scala_list(struct.valExprs())
    remainder = _find(start, "Remainder")
    add = _find(end, "Add")
    if remainder is not None and add is not None:
        slide = _long_literal(remainder.right())
        offset = _long_literal(remainder.left().right()) \
            if _class(remainder.left()) == "Subtract" else None
        duration = _long_literal(add.right())
        if slide is None or duration is None:
            return False, None
        return True, WindowSpec(kind="time", duration_us=duration, slide_us=slide,
                                start_us=offset)
    added = _find(end, "TimestampAddInterval")
    if added is None:
        return False, None
    gaps = [_interval_micros(child) for child in scala_list(added.children())[1:]]
    if len(gaps) != 1 or gaps[0] is None:
        return True, None
    return True, WindowSpec(kind="session", gap_us=gaps[0])


def _window(node: Any) -> WindowSpec | None:
    """The window computed between this stateful operator and the stateful operators below
    it (their windows are their own). An aggregation's restore half has its own id."""
    own = _operator_id(node)
    stack = list(reversed(_children(node)))
    while stack:
        current = stack.pop()
        if _operator_id(current) not in (None, own):
            continue
        for expr in scala_list(current.expressions()):
            for struct in _find_all(expr, "CreateNamedStruct"):
                names = [str(name) for name in scala_list(struct.names())]
                if names != ["start", "end"]:
                    continue
                recognized, window = _window_of_struct(struct)
                if recognized:
                    return window
        stack.extend(reversed(_children(current)))
    return NO_WINDOW


_AGGREGATE_EXECS = ("HashAggregateExec", "ObjectHashAggregateExec", "SortAggregateExec",
                    "MergingSessionsExec")
# The operators whose state value ends with their aggregate's buffers (a session window's
# holds the whole row: its keys and session first).
_AGGREGATING = ("stateStoreSave", "sessionWindowStateStoreSaveExec")
_WRAPPERS = ("WholeStageCodegenExec", "InputAdapter")


def _aggregates(node: Any) -> tuple[AggregateState, ...] | None:
    """A ``StateStoreSaveExec``'s (or session window's) aggregate functions, from the
    partial-merge aggregate below it whose output (keys, then every function's buffer) is
    what the state stores."""
    if str(node.shortName()) not in _AGGREGATING:
        return None
    child = node.child()
    while _class(child) in _WRAPPERS:
        child = child.child()
    if _class(child) not in _AGGREGATE_EXECS:
        return None
    found = []
    for expression in scala_list(child.aggregateExpressions()):
        function = expression.aggregateFunction()
        buffer = tuple(BufferColumn(name=str(a.name()), type=json.loads(str(a.dataType().json())))
                       for a in scala_list(function.aggBufferAttributes()))
        try:
            initial: tuple[str, ...] | None = tuple(
                str(value.sql()) for value in scala_list(function.initialValues()))
        except Exception:  # py4j: an imperative aggregate has no initialValues
            initial = None
        found.append(AggregateState(function=str(function.sql()), buffer=buffer,
                                    initial=initial, merge=_merge_sql(function)))
    return tuple(found)


# java/sparkpoint/spark/BufferMergeSql.java: an aggregate's mergeExpressions as Spark SQL.
BUFFER_MERGE_SQL = "sparkpoint.spark.BufferMergeSql"


def _merge_sql(function: Any) -> tuple[str, ...] | None:
    """Spark's merge of two of the function's buffers as SQL (sparkpoint's jar); None when
    the session cannot load the jar's class or the function has no merge expressions."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None:
        return None
    try:
        found = getattr(jvm, BUFFER_MERGE_SQL).of(function)
    except Exception:  # py4j: the class is not in this session (a caller's, without the jar)
        return None
    return None if found is None else tuple(str(sql) for sql in found)


def _executed_plan(frame: DataFrame) -> Any:
    return frame._jdf.queryExecution().queryExecutionForExplain().executedPlan()


def derived_name(spark_operator_name: str, keys: tuple[str, ...]) -> str:
    """A deterministic name for an unnamed operator: its kind and key columns."""
    return f"{spark_operator_name}({','.join(keys)})"


def stateful_operators(
    frame: DataFrame, declarations: list[StatefulDeclaration]
) -> list[PlannedOperator]:
    nodes = _stateful_nodes(_executed_plan(frame))
    planned: list[dict[str, Any]] = []
    for node in nodes:
        planned.append(
            {
                "operator_id": int(node.stateInfo().get().operatorId()),
                "spark_operator_name": str(node.shortName()),
                "signature": _signature(node),
                "window": _window(node),
                "aggregates": _aggregates(node),
                "name": None,
            }
        )
    for declaration in declarations:
        declared_nodes = _stateful_nodes(_executed_plan(declaration.frame))
        if not declared_nodes:
            raise JobFileError(
                f"ctx.stateful('{declaration.name}', ...): expected a DataFrame whose plan ends "
                "in a stateful operator (aggregation, dropDuplicates, join, ...), found none"
            )
        top_kind = str(declared_nodes[0].shortName())
        wanted = _signature(declared_nodes[0])
        candidates = [op for op in planned if op["signature"] == wanted]
        if len(candidates) != 1:
            raise JobFileError(
                f"ctx.stateful('{declaration.name}', ...): its operator ({top_kind}) is not part "
                "of the returned query, or is ambiguous; name a frame the sink depends on"
            )
        if candidates[0]["name"] is not None:
            raise JobFileError(
                f"ctx.stateful('{declaration.name}', ...) names the same operator as "
                f"'{candidates[0]['name']}'"
            )
        candidates[0]["name"] = declaration.name
    result = []
    for op in sorted(planned, key=lambda item: item["operator_id"]):
        named = op["name"] is not None
        name = op["name"] or derived_name(op["spark_operator_name"], op["signature"][1])
        if not named:
            log.warning(
                "stateful operator %s (Spark operator id %d) has no name; using the derived "
                "name '%s'. Name it with ctx.stateful(name, df) so that its state survives "
                "changes to the job",
                op["spark_operator_name"], op["operator_id"], name,
            )
        result.append(
            PlannedOperator(
                operator_id=op["operator_id"],
                spark_operator_name=op["spark_operator_name"],
                name=name,
                named_by_user=named,
                window=op["window"],
                aggregates=op["aggregates"],
            )
        )
    return result
