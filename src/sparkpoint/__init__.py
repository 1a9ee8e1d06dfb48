"""sparkpoint: savepoints, resume points, drain and startpoints for Spark Structured Streaming."""

from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.context import JobContext

# The in-driver API's names do not reuse those of subpackages (sparkpoint.snapshot,
# sparkpoint.drain): an imported subpackage would shadow them.
__all__ = ["JobContext", "SparkpointError", "await_job", "drain_job", "plan",
           "snapshot_create", "snapshot_inspect", "snapshot_list", "snapshot_verify", "start"]
__version__ = "0.1.0"

_EMBEDDED = {"await_job", "drain_job", "plan", "snapshot_create", "snapshot_inspect",
             "snapshot_list", "snapshot_verify", "start"}


def __getattr__(name: str) -> object:
    # The in-driver API (sparkpoint.start, sparkpoint.snapshot...) is loaded on first use:
    # job files import this package for JobContext and need none of it.
    if name in _EMBEDDED:
        from sparkpoint import embedded

        return getattr(embedded, name)
    raise AttributeError(f"module 'sparkpoint' has no attribute {name!r}")
