"""GTIDs of both flavours, sans-IO: MariaDB's (gtid: positions and the binlog state, in
MariaDB's hash order: hashorder) and MySQL's (mysqlgtid: GTID sets and events), and the spans
of the index of the stored history (spans: what a stretch of a file holds), which storage,
serving and the pipeline read.  Below: relay.binlog (the event format)."""
