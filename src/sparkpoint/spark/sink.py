"""What sink a job's DataStreamWriter writes to, read from Spark's writer object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkpoint.checkpoint.sink_log import output_location
from sparkpoint.errors import UsageError
from sparkpoint.storage.paths import check_location
from sparkpoint.storage.stores import file_io

if TYPE_CHECKING:
    from pyspark.sql.streaming.readwriter import DataStreamWriter

FILE_FORMATS = {"parquet", "json", "csv", "orc", "text", "avro"}


def private_field(obj: Any, name: str) -> Any:
    """Spark keeps the writer's format and options private; Java reflection reads them."""
    cls = obj.getClass()
    while cls is not None:
        try:
            field = cls.getDeclaredField(name)
        except Exception:  # py4j wraps NoSuchFieldException
            cls = cls.getSuperclass()
            continue
        field.setAccessible(True)
        return field.get(obj)
    return None


def sink_format(writer: DataStreamWriter) -> str:
    """The sink's format as the job gave it (``parquet``, ``foreachBatch``, ``kafka``...)."""
    source = private_field(writer._jwrite, "source")
    return str(source) if source is not None else "unknown"


def file_sink_path(writer: DataStreamWriter) -> str | None:
    """The output directory of a file sink: a local one as its absolute path, one on S3 or
    HDFS as the URL Spark writes it at (``s3a://``, ``s3://``, ``hdfs://``, ``webhdfs://``).
    None for any other sink, and for a file sink on a store sparkpoint cannot read (a scheme
    ``storage/fileio.py`` has no FileIO for): that sink's log cannot be checked."""
    jwriter = writer._jwrite
    source = private_field(jwriter, "source")
    if source is None or str(source).lower() not in FILE_FORMATS:
        return None
    options = private_field(jwriter, "extraOptions")
    path = options.get("path") if options is not None else None
    if path is None or not path.isDefined():
        return None
    # Read here where Spark writes it, or refused before anything is written.
    location = output_location(check_location(str(path.get()), "output"))
    try:
        file_io(location)
    except UsageError:
        return None
    return location


@dataclass(frozen=True)
class KafkaOutput:
    """What Spark's Kafka sink (``format("kafka")``) writes to: its brokers and its topic
    (None: each row's ``topic`` column names it). ``timestamp_column``: the rows have a
    ``timestamp`` column; the connector 4.2.0 ignores it (the producer stamps each record
    when it is sent), Spark's newer connectors write it as the record's timestamp."""

    bootstrap: str
    topic: str | None
    timestamp_column: bool = False


def kafka_output(writer: DataStreamWriter) -> KafkaOutput | None:
    """The Kafka sink's brokers and topic, None for any other sink."""
    jwriter = writer._jwrite
    source = private_field(jwriter, "source")
    if source is None or str(source).lower() != "kafka":
        return None
    options = private_field(jwriter, "extraOptions")

    def option(name: str) -> str | None:
        # A case-insensitive Scala map: Option of the value.
        found = options.get(name) if options is not None else None
        return str(found.get()) if found is not None and found.isDefined() else None

    bootstrap = option("kafka.bootstrap.servers")
    if bootstrap is None:
        return None  # Spark refuses the query itself; nothing to say about its topic
    columns = {name.lower() for name in writer._df.columns}
    return KafkaOutput(bootstrap, option("topic"), "timestamp" in columns)
