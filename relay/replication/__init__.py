"""The replication streams, sans-IO.  Ingest: the upstream dump stream (stream.IngestStream)
and the relay's own files after a switch of primary (translate).  Serving: what a replica is
sent (outbound: filters, framing; compat: rewrites for its capabilities; gtidstart: where a
GTID dump starts).  Semi-sync on both legs (semisync).  Below: relay.gtid and relay.binlog."""
