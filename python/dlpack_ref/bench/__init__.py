"""Benchmarking helpers shipped with the package: ``timing`` (interleaved
wall-clock timing) and ``callgrind`` (instructions per call).

Importing this package imports neither: the counting child of ``callgrind``
starts with as little as it can.
"""
