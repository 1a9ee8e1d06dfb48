"""Reading a job file before Spark starts: syntax, ``build``, params it always requires."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint.errors import JobFileError
from sparkpoint.runtime.jobfile import check_job_file, check_required_params


def _job(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(text)
    return path


def test_params_build_always_requires_are_found(tmp_path: Path) -> None:
    shape = check_job_file(_job(tmp_path, '''
def build(spark, ctx):
    out = ctx.require_param("output")
    if ctx.param("source") == "kafka":
        ctx.require_param("brokers")
    try:
        ctx.require_param("maybe")
    except Exception:
        pass
    return spark.readStream.json(ctx.require_param("input")).writeStream.option("path", out)
'''))
    assert shape.required_params == ("output", "input")
    check_required_params(shape, "j", {"output": "o", "input": "i"})
    with pytest.raises(JobFileError, match=r"needs --param input=\.\.\. \(job\.py calls"):
        check_required_params(shape, "j", {"output": "o"})


def test_syntax_error_and_missing_or_wrong_build(tmp_path: Path) -> None:
    with pytest.raises(JobFileError, match=r"not valid Python \(line 3\)"):
        check_job_file(_job(tmp_path, "import x\n\ndef build(spark, ctx:\n"))
    with pytest.raises(JobFileError, match="expected a function 'build"):
        check_job_file(_job(tmp_path, "def make(spark, ctx):\n    pass\n"))
    with pytest.raises(JobFileError, match=r"two arguments .* found 1"):
        check_job_file(_job(tmp_path, "def build(spark):\n    pass\n"))
    with pytest.raises(JobFileError, match="job file not found"):
        check_job_file(tmp_path / "missing.py")


def test_build_bound_otherwise_is_left_to_the_import(tmp_path: Path) -> None:
    assert check_job_file(_job(tmp_path, "from elsewhere import build\n")).required_params == ()
    assert check_job_file(_job(tmp_path, "build = make()\n")).required_params == ()
