"""Change-data tables from the relay's stored binlogs, with PySpark (the optional ``spark`` extra).

relay.pipeline.plan     which group-aligned file ranges to read (no Spark needed)
relay.pipeline.source   the "binlog" Spark data source (batch and streaming)
relay.pipeline.export   ``binlog-relay export``: a data_dir to Parquet/JSON/CSV
relay.pipeline.jsonform the JSON form of row values both of them write

The decoding itself is relay.rows.changes (sans-IO, no Spark). See README.md here.
"""
