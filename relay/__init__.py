"""binlog-relay: a MySQL/MariaDB binlog server."""

__version__ = "0.1.0"
