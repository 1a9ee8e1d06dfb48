"""A failing query's message as sparkpoint reports it: Spark's error class and the real cause."""

from __future__ import annotations

from sparkpoint.spark.errors import failure_summary as spark_error_summary

FRAME = '  File "/venv/pyspark.zip/pyspark/worker.py", line 2845, in read_udfs\n' \
        "    import pyarrow as pa\n"


def test_a_python_worker_failure_names_the_python_exception() -> None:
    text = ("[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback "
            f"(most recent call last):\n{FRAME}ModuleNotFoundError: No module named 'pyarrow'\n"
            " SQLSTATE: 38000\n=== Streaming Query ===\nIdentifier: p [id = 1]\n"
            "\tat org.apache.spark.api.python.BasePythonRunner.handle(PythonRunner.scala:1)\n")
    assert spark_error_summary(RuntimeError(text)) == (
        "a Python function raised ModuleNotFoundError: No module named 'pyarrow' "
        "(worker.py line 2845, in read_udfs)")


def test_a_data_source_failure_keeps_the_last_exception_and_its_message_lines() -> None:
    text = ("[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source 'kafka' in Python: "
            f"Traceback (most recent call last):\n{FRAME}KeyError: 'a'\n\nDuring handling...\n"
            f"Traceback (most recent call last):\n{FRAME}RuntimeError: broker down\n"
            "retry later\n SQLSTATE: 38000\nJVM stacktrace:\n\tat x.y(Z.scala:1)\n")
    assert spark_error_summary(RuntimeError(text)) == (
        "a Python function raised RuntimeError: broker down retry later "
        "(worker.py line 2845, in read_udfs)")


def test_a_jvm_failure_is_cut_before_the_stack_trace() -> None:
    text = ("[UNRESOLVED_COLUMN] A column `nope` cannot be resolved.\n"
            "\tat org.apache.spark.sql.Foo(Foo.scala:1)\nCaused by: x\n")
    assert spark_error_summary(RuntimeError(text)) == (
        "[UNRESOLVED_COLUMN] A column `nope` cannot be resolved.")


def test_spark_kafka_data_loss_range_is_exact_only_when_no_fetch_was_refused() -> None:
    """Spark's connector (KafkaDataConsumer.get) reports a fetch the broker refused as the
    task's range [position, end of its share of the batch): the end is not where the
    broker's records start. A record found past the position gives the exact range."""
    from sparkpoint.spark.errors import kafka_data_loss

    reason = ("[KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE] Some data may have been lost "
              "because they are not available in Kafka any more; ... Reason: Could not read "
              "records in offset [100, 200) for topic partition words-0 with consumer group "
              "spark-kafka-source-1.")
    refused = RuntimeError(reason + "\nCaused by: org.apache.kafka.clients.consumer."
                           "OffsetOutOfRangeException: Fetch position FetchPosition{offset=100}")
    loss = kafka_data_loss(refused)
    assert loss is not None and not loss.end_exact
    assert loss.describe() == ("offsets from 100 of words-0 (the batch was to read "
                               "[100, 200); where the broker's records now start was not "
                               "learnt)")
    skipped = kafka_data_loss(RuntimeError(reason))
    assert skipped is not None and skipped.describe() == "offsets [100, 200) of words-0"
    assert kafka_data_loss(RuntimeError("[UNRESOLVED_COLUMN] nope")) is None
