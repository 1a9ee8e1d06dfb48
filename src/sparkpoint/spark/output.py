"""A job's output moved to scratch space, and output files read back as rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkpoint.spark.sink import FILE_FORMATS, file_sink_path, private_field
from sparkpoint.storage.fileio import spark_url
from sparkpoint.storage.location import Location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

# Spark names its output files part-...-c000[.codec].<format>.
_SUFFIX_FORMATS = {"parquet": "parquet", "orc": "orc", "json": "json", "csv": "csv",
                   "avro": "avro", "txt": "text"}
NUMERIC_TYPES = ("byte", "short", "integer", "long", "float", "double", "decimal")
BATCH_DIR_PREFIX = "batch-"


def redirect_output(writer: DataStreamWriter, directory: Location) -> DataStreamWriter:
    """The job's writer, writing to ``directory`` instead of its own sink.

    A file sink keeps its format, options and partitioning, only its path changes. Any other
    sink (Kafka, foreachBatch, console...) must not receive a rehearsal's rows: each batch
    goes to ``directory/batch-<id>`` as parquet instead."""
    if file_sink_path(writer) is not None:
        return writer.option("path", spark_url(str(directory)))

    def write_batch(frame: DataFrame, batch_id: int) -> None:
        frame.write.mode("overwrite").parquet(
            spark_url(str(directory / f"{BATCH_DIR_PREFIX}{batch_id}")))

    return writer.foreachBatch(write_batch)


def output_format(writer: DataStreamWriter) -> str | None:
    """The file sink's format, or None for another sink."""
    source = private_field(writer._jwrite, "source")
    name = str(source).lower() if source is not None else ""
    return name if name in FILE_FORMATS else None


def format_of_files(files: list[str], default: str) -> str:
    """The format Spark wrote ``files`` in, told by their suffix."""
    for name in files:
        suffix = name.rsplit(".", 1)[-1].lower()
        if suffix in _SUFFIX_FORMATS:
            return _SUFFIX_FORMATS[suffix]
    return default


def output_frame(spark: SparkSession, fmt: str, paths: list[str], base: Location | str | None,
                 options: dict[str, str] | None = None) -> DataFrame:
    """The given output files (or directories) as a DataFrame, nothing collected.

    ``base`` is the output directory, so partition columns (``day=...`` directories) come
    back as columns, as a reader of the whole output would see them."""
    reader = spark.read.format(fmt).options(**(options or {}))
    if base is not None:
        reader = reader.option("basePath", spark_url(str(base)))
    return reader.load(paths)


def numeric_columns(frame: DataFrame) -> frozenset[str]:
    return frozenset(f.name for f in frame.schema.fields
                     if f.dataType.typeName() in NUMERIC_TYPES)


def writer_options(writer: DataStreamWriter) -> dict[str, str]:
    """The writer's options other than its path (csv's header, sep... read back alike)."""
    options = private_field(writer._jwrite, "extraOptions")
    if options is None:
        return {}
    found: dict[str, str] = {}
    iterator = options.iterator()
    while iterator.hasNext():
        pair = iterator.next()
        key, value = str(pair._1()), str(pair._2())
        if key.lower() not in ("path", "checkpointlocation"):
            found[key] = value
    return found
