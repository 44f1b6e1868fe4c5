"""Throw-away servers and the demo: what ``binlog-relay demo``, the tests and the benchmarks share.

    mariadb.py       LocalMariaDB: a throw-away mariadbd on loopback (template datadir, my.cnf,
                     start/stop/kill, no server outlives the process), and SQL on it as root
    relayprocess.py  RelayProcess: ``binlog-relay run`` as a child process (config, log, stop)
    replication.py   a MariaDB replica pointed at a source, waits until it caught up
    compare.py       is a directory of binlog files a byte copy of the primary's?
    client.py        the relay's own sans-IO client on a blocking socket (queries, raw dumps)
    binlogfiles.py   binlog files read by their event headers only
    s3.py            MotoServer: a throw-away S3 API server (moto) on loopback, for the archive
    motoserver.py    moto's server as s3.py runs it (dies with its parent, real upload starts)
    polling.py, ports.py, procfs.py, errors.py: waiting with a deadline, free loopback ports,
                     /proc figures, the errors of this package
    demo.py          ``binlog-relay demo``

The product never imports this package: only the ``demo`` command of relay/cli.py does, lazily
(tests/unit/test_layers.py checks it).  Importing a module here imports no trio, except demo.py:
the benchmarks' parent process stays free of the code it measures.
"""
