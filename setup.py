"""Build configuration that pyproject.toml cannot express: the optional C modules.

relay/binlog/_scan.c runs the relay's per-event loops (see its header); relay/pipeline/_jsontext.c
writes the export's JSON text of row images. Both are optional: where no C compiler is found the
package installs without them, and relay/replication/stream.py, relay/replication/outbound.py and
relay/pipeline/jsonform.py do the same work in Python, only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("relay.binlog._scan", ["relay/binlog/_scan.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   Extension("relay.rows.coltypes._rowread", ["relay/rows/coltypes/_rowread.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   Extension("relay.pipeline._jsontext", ["relay/pipeline/_jsontext.c"], optional=True,
                             extra_compile_args=["-O2"])])
