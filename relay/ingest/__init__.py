"""The upstream side's trio shell, one concern a module; ``relay/upstream.py`` (``Upstream``) runs them.

settings and status: what ingest is told and what it reports; connection: one login to a primary;
choosing: which candidate to follow, vetted by the decisions of ``relay/candidates.py``; dumpstart:
a dump started by position or by GTID; acks: semi-sync acknowledgements; refetch: a damaged stored
file dumped again (``storage/repair.py`` writes it); diskfull: waiting out a full data_dir; errors:
what ingest retries and what stops it.
"""
