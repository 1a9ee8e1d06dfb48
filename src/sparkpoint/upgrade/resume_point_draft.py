"""``resume-point build``: the default resume point of a job file from a snapshot, as YAML a
user edits (same names resume, new ones initialize; what the job drops is commented)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.runtime.runner import plan_job
from sparkpoint.snapshot.store import open_snapshot_store
from sparkpoint.storage.home import Home
from sparkpoint.upgrade.restore import job_shape
from sparkpoint.upgrade.resume_point import flow_mapping
from sparkpoint.upgrade.validate import default_resume_point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def draft_resume_point(home: Home, job_file: Path, snapshot: str, params: Mapping[str, str],
                       conf: Mapping[str, str], master: str | None,
                       spark: SparkSession | None) -> str:
    """The YAML text; snapshot operators the job lacks are listed in comments, to drop
    deliberately."""
    manifest = open_snapshot_store(home).get(snapshot)
    planned = plan_job("resume-point", job_file.absolute(), dict(params), dict(conf), master,
                       spark, log_dir=home.logs_dir, command="resume-point build")
    try:
        shape, _layouts = job_shape(planned)
    finally:
        planned.release()
    point = default_resume_point(shape, snapshot, manifest)
    names = {op.name for op in shape.operators}
    left = [op for op in manifest.operators if op.name not in names]
    text = f"# resume point for {job_file.name} from snapshot '{snapshot}' (job " \
           f"'{manifest.job}', batch {manifest.batch_id})\n" + point.to_yaml(bool(left))
    if left:
        text += ("# state of the snapshot that no operator of the job resumes; drop it "
                 "deliberately, or resume it under another name in state:\n# drop:\n")
        text += "".join(f"#   - {flow_mapping(snapshot=snapshot, operator=op.name)}  "
                        f"# {op.kind}, {op.rows} rows\n" for op in left)
    return text
