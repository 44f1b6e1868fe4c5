"""Row decoding, sans-IO, for the pipeline only (no module of the relay path imports it):
table maps (tablemap), rows events (rows), the column types (coltypes/), change rows
(changes) and committed transactions (transactions).  Below: relay.gtid and relay.binlog."""
