"""Exports: what an export holds, the table of formats, the data writers, the path checks, and atomic
folder writes with their lock."""
