"""The script spark-submit runs for a managed job (``sparkpoint submit-entry`` prints its path).

    spark-submit --master spark://host:7077 [--conf ... --packages ...] \\
        "$(sparkpoint submit-entry)" [--home DIR] run JOB.py --job NAME [--param k=v ...]

spark-submit has already decided the master, the deploy mode, the jars and every --conf;
the session it configured is taken as it is and handed to the same ``run`` the CLI has, so
the job is a sparkpoint job like any other: its record, lock, progress, stop requests,
snapshots while it runs, drain and startpoints all work. The arguments after the script are
sparkpoint's own, as on the command line.
"""

from __future__ import annotations

import sys


def main() -> None:
    from pyspark.sql import SparkSession

    from sparkpoint.cli.main import main as cli_main

    spark = SparkSession.builder.getOrCreate()
    code = 0
    try:
        cli_main(sys.argv[1:], spark=spark)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        spark.stop()
    sys.exit(code)


if __name__ == "__main__":
    main()
