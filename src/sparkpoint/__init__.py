"""sparkpoint: savepoints, resume points, drain and startpoints for Spark Structured Streaming."""

from sparkpoint.errors import SparkpointError
from sparkpoint.runtime.context import JobContext

__all__ = ["JobContext", "SparkpointError"]
__version__ = "0.1.0"
