"""Test support code shared by the whole suite (real MariaDB servers and helpers)."""
