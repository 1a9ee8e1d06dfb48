"""Regenerate the golden checkpoints in tests/data (golden-rocks, golden-hdfs).

    .venv/bin/python tests/data/make_golden.py

A named file source feeding a watermarked dedupe and a windowed count, two input files,
two availableNow runs (four batches, two of them no-data batches), 2 shuffle partitions.
Hadoop's .crc siblings are dropped; everything else is what Spark 4.3 wrote.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

HERE = Path(__file__).resolve().parent
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def write(directory: Path, index: int, rows: list[dict[str, str]]) -> None:
    (directory / f"f{index}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def generate(spark: SparkSession, provider: str, target: Path) -> None:
    work = Path(tempfile.mkdtemp())
    inp = work / "in"
    inp.mkdir()
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    write(inp, 0, [{"user": "a", "url": "x", "ts": "2026-01-01T00:00:00"},
                   {"user": "b", "url": "y", "ts": "2026-01-01T00:10:00"},
                   {"user": "a", "url": "x", "ts": "2026-01-01T00:00:00"}])
    clicks = (spark.readStream.name("clicks").schema("user STRING, url STRING, ts TIMESTAMP")
              .json(str(inp)))
    unique = clicks.withWatermark("ts", "10 minutes").dropDuplicates(["user", "url", "ts"])
    counts = unique.groupBy(F.window("ts", "1 hour"), "user").count()
    writer = (counts.writeStream.format("parquet").option("path", str(work / "out"))
              .option("checkpointLocation", str(work / "ck")).outputMode("append"))
    writer.trigger(availableNow=True).start().awaitTermination()
    write(inp, 1, [{"user": "c", "url": "z", "ts": "2026-01-01T02:10:00"}])
    writer.trigger(availableNow=True).start().awaitTermination()
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(work / "ck", target, ignore=shutil.ignore_patterns("*.crc"))
    shutil.rmtree(work)


def main() -> None:
    spark = (SparkSession.builder.master("local[2]")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.queryEvolution.enableSourceEvolution", "true")
             .getOrCreate())
    generate(spark, ROCKSDB, HERE / "golden-rocks")
    generate(spark, HDFS, HERE / "golden-hdfs")
    spark.stop()


if __name__ == "__main__":
    main()
