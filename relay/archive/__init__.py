"""The archive of stored binlog files on object storage (S3 and S3-compatible stores).

``objectformat`` is the archived object's format, sans-IO (decision 6): a binlog file becomes one
object of independently compressed (and optionally encrypted) frames with a seek table at its end,
plus a small meta document beside it that holds the wrapped data key; any byte range of the file is
read back by fetching and decoding only the frames that cover it.  ``store`` is the object store
client the relay's trio shell calls in worker threads.
"""
