"""Exports: the format writers, atomic folder writes and the path checks, and what an export holds."""
