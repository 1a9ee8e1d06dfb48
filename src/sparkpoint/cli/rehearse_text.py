"""The text a reviewer reads after ``sparkpoint rehearse``."""

from __future__ import annotations

from typing import Any

from sparkpoint.rehearse.run import Rehearsal


def _row(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in row.items())


def _changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The columns that differ between two rows of one key: ``clicks: 4 -> 3``."""
    return ", ".join(f"{k}: {old[k]} -> {new.get(k)}" for k in old if old[k] != new.get(k))


def rehearsal_text(result: Rehearsal) -> str:
    first, last = result.batches
    lines = [f"rehearsal against job '{result.job}' from {', '.join(result.snapshots)}: "
             f"replayed batches {first}..{last}"]
    c = result.comparison
    if c is None:
        lines.append(f"note: {result.note}")
        lines.append(f"new output: {result.new_rows} rows")
        lines.extend(f"  {_row(r)}" for r in result.new_examples)
        return "\n".join(lines)
    lines.append(f"old output: {c.old_rows} rows, new output: {c.new_rows} rows; in both: "
                 f"{c.in_both}, only in old: {c.only_old}, only in new: {c.only_new}")
    if c.columns_only_old or c.columns_only_new:
        lines.append(f"columns only in old: {', '.join(c.columns_only_old) or 'none'}; only "
                     f"in new: {', '.join(c.columns_only_new) or 'none'} (rows compared on "
                     f"{', '.join(c.compared_columns) or 'no column'})")
    examples = c.examples
    if examples["key_columns"]:
        lines.append(f"key columns: {', '.join(examples['key_columns'])}")
    if examples["changed"]:
        lines.append("changed (old -> new), by key:")
        for group in examples["changed"]:
            pairs = zip(group["old"], group["new"], strict=False)
            change = "; ".join(_changes(o, n) for o, n in pairs)
            lines.append(f"  {_row(group['key'])}: {change}")
    for kind, title in (("only_old", "only in old"), ("only_new", "only in new")):
        if examples[kind]:
            lines.append(f"{title}, e.g.:")
            lines.extend(f"  {_row(r)}" for r in examples[kind])
    lines.append("outputs are equal" if result.equal else "outputs differ")
    return "\n".join(lines)
