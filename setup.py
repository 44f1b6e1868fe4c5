"""Build configuration that pyproject.toml cannot express: the optional C loops.

relay/binlog/_scan.c runs the relay's per-event loops (see its header). It is optional: where
no C compiler is found the package installs without it, and relay/binlog/stream.py and
relay/binlog/outbound.py do the same work in Python, only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("relay.binlog._scan", ["relay/binlog/_scan.c"], optional=True,
                             extra_compile_args=["-O2"])])
