"""The numbers of the MySQL protocol that more than one module needs, in one place: the first byte
of each kind of packet, the flags of COM_BINLOG_DUMP, semi-sync's packet header and the error codes
(docs/protocol.md).  Every other module imports them from here; none spells them out again.

Command bytes (COM_*) are in ``events``, next to the events they become.
"""

from __future__ import annotations

# ---------------------------------------------------------------- the first byte of a payload

OK_PACKET = 0x00
EVENT_PACKET = 0x00  # a dump's binlog event: 00 | event (behind ef | flag under semi-sync)
AUTH_MORE_DATA = 0x01  # 01 | plugin data (caching_sha2_password's, below)
EOF_PACKET = 0xFE  # under 9 bytes; longer, the same byte starts an auth switch request
AUTH_SWITCH_REQUEST = 0xFE
ERR_PACKET = 0xFF

# caching_sha2_password's exchanges after the token (sha2_cache_and_full_auth in MySQL's plugin)
SHA2_REQUEST_PUBLIC_KEY = 0x02  # the client's whole packet: send me your RSA public key
SHA2_FAST_AUTH_OK = 0x03  # 01 03: the cached hash matched, an OK follows
SHA2_PERFORM_FULL_AUTH = 0x04  # 01 04: send the password (over TLS, or RSA-encrypted)

# ---------------------------------------------------------------- semi-sync (semisync_master.cc)

SEMI_SYNC_MAGIC = 0xEF  # 00 | ef | flag | event, and the replica's ACK: ef | position | file
ACK_WANTED = 0x01  # the flag: the primary waits for an ACK of this event (a group's last)

# ---------------------------------------------------------------- COM_BINLOG_DUMP flags

BINLOG_DUMP_NON_BLOCK = 0x01  # EOF at the end of the binlog instead of waiting
# 0x02 is MariaDB's "send ANNOTATE_ROWS" and MySQL's USE_HEARTBEAT_EVENT_V2 (rpl_binlog_sender.cc)
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02
USE_HEARTBEAT_EVENT_V2 = 0x02

# ---------------------------------------------------------------- error codes (mysqld_error.h)

ER_CON_COUNT_ERROR = 1040
ER_HANDSHAKE_ERROR = 1043
ER_ACCESS_DENIED_ERROR = 1045
ER_UNKNOWN_COM_ERROR = 1047
ER_PARSE_ERROR = 1064
ER_EMPTY_QUERY = 1065
ER_NET_PACKET_TOO_LARGE = 1153
ER_UNKNOWN_SYSTEM_VARIABLE = 1193
ER_SLAVE_MUST_STOP = 1198
ER_MASTER_INFO = 1201
ER_WRONG_ARGUMENTS = 1210
ER_CONNECT_TO_MASTER = 1218
ER_ERROR_WHEN_EXECUTING_COMMAND = 1220
ER_SPECIFIC_ACCESS_DENIED_ERROR = 1227
ER_NOT_SUPPORTED_YET = 1235
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
ER_SLAVE_WAS_RUNNING = 1254
ER_SLAVE_WAS_NOT_RUNNING = 1255
ER_UNKNOWN_TARGET_BINLOG = 1373
ER_LOG_IN_USE = 1378
ER_WRONG_VALUE = 1411
ER_WRONG_STRING_LENGTH = 1470
ER_SLAVE_FATAL_ERROR = 1593
ER_MALFORMED_GTID_SET_ENCODING = 1773
ER_MALFORMED_PACKET = 1835
ER_INCORRECT_GTID_STATE = 1941
ER_DUPLICATE_GTID_DOMAIN = 1943
ER_SECURE_TRANSPORT_REQUIRED = 3159
