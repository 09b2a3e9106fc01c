"""`kbroker pipeline`: Spark Structured Streaming jobs over kbroker topics."""

from __future__ import annotations

import click

from kbroker.cli.common import split_setting


def _pipeline_errors() -> tuple[type[BaseException], ...]:
    from kbroker.spark.common import pipeline_exceptions

    return pipeline_exceptions()


def _pipeline_failed(exc: BaseException) -> click.ClickException:
    from kbroker.spark.common import failure_message

    return click.ClickException(failure_message(exc))


def _spark_conf(conf: tuple[str, ...]) -> dict[str, str]:
    try:
        return dict(split_setting(c) for c in conf)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="--conf") from None


_master_option = click.option(
    "--master",
    default=None,
    help="Spark master URL (spark://HOST:7077, yarn, ...) [local[*]].",
)
_conf_option = click.option(
    "--conf",
    "conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any Spark setting (repeatable).",
)
_interval_option = click.option(
    "--interval", default="10s", show_default=True, help="Time between micro-batches."
)
_pipeline_bootstrap = click.option(
    "--bootstrap",
    default="127.0.0.1:9092",
    show_default=True,
    help="HOST:PORT[,HOST:PORT...] of brokers.",
)


@click.group("pipeline")
def pipeline() -> None:
    """Spark Structured Streaming jobs over kbroker topics (needs kbroker[spark])."""
    try:
        import py4j  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(
            f"the Spark pipelines need {exc.name or 'PySpark'}, which the `spark` extra installs: "
            "pip install 'kbroker[spark]'"
        ) from None


@pipeline.command("archive")
@click.option("--topic", required=True, help="A topic, TOPIC,TOPIC,... or a regular expression.")
@click.option("--output", required=True, help="Output directory (a path or any Hadoop URI).")
@_pipeline_bootstrap
@click.option("--once", is_flag=True, help="Archive what is there now, then exit.")
@click.option("--checkpoint", default=None, help="Checkpoint location [OUTPUT/_checkpoint].")
@_interval_option
@click.option(
    "--max-records-per-batch",
    type=click.IntRange(min=1),
    default=None,
    help="Bound on the records of one micro-batch.",
)
@_master_option
@_conf_option
def pipeline_archive(
    topic: str,
    output: str,
    bootstrap: str,
    once: bool,
    checkpoint: str | None,
    interval: str,
    max_records_per_batch: int | None,
    master: str | None,
    conf: tuple[str, ...],
) -> None:
    """Persist topics as Parquet partitioned by topic, date and hour, exactly once
    across restarts. Runs until SIGTERM/SIGINT unless --once."""
    from kbroker.spark import archive, spark_session
    from kbroker.spark.archive import check_archive

    try:
        check_archive(bootstrap, topic, output, checkpoint, interval)  # before the JVM starts
        spark = spark_session(master, "kbroker-archive", _spark_conf(conf))
        archive(
            spark,
            bootstrap,
            topic,
            output,
            checkpoint=checkpoint,
            once=once,
            interval=interval,
            max_records_per_batch=max_records_per_batch,
        )
    except _pipeline_errors() as exc:
        raise _pipeline_failed(exc) from None


@pipeline.command("aggregate")
@click.option(
    "--topic", required=True, help="Input topic; values are numbers (or JSON, see --field)."
)
@click.option("--output-topic", required=True, help="Topic the per-window results are written to.")
@click.option(
    "--window", default="10s", show_default=True, help="Tumbling window length (10s, 5m, 1h...)."
)
@click.option("--watermark", default="30s", show_default=True, help="How late a record may be.")
@click.option("--field", default=None, help="Take the number from this member of a JSON value.")
@_pipeline_bootstrap
@click.option("--once", is_flag=True, help="Process what is there now, then exit.")
@click.option(
    "--checkpoint",
    default=None,
    help="Checkpoint location [~/.local/state/kbroker/pipeline/aggregate-IN-OUT].",
)
@_interval_option
@_master_option
@_conf_option
def pipeline_aggregate(
    topic: str,
    output_topic: str,
    window: str,
    watermark: str,
    field: str | None,
    bootstrap: str,
    once: bool,
    checkpoint: str | None,
    interval: str,
    master: str | None,
    conf: tuple[str, ...],
) -> None:
    """Per-key count, sum and average over tumbling windows of the record time,
    with a watermark for late records, written to another topic."""
    from kbroker.spark import aggregate, spark_session
    from kbroker.spark.aggregate import check_aggregate

    try:
        check_aggregate(
            bootstrap,
            topic,
            output_topic,
            window=window,
            watermark=watermark,
            field=field,
            interval=interval,
        )  # before the JVM starts
        spark = spark_session(master, "kbroker-aggregate", _spark_conf(conf))
        aggregate(
            spark,
            bootstrap,
            topic,
            output_topic,
            window=window,
            watermark=watermark,
            field=field,
            checkpoint=checkpoint,
            once=once,
            interval=interval,
        )
    except _pipeline_errors() as exc:
        raise _pipeline_failed(exc) from None
