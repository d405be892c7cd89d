"""``dlpack-ref bench``: zero-copy exchange benchmarked between any installed
array libraries, in one process, on the conformance checker's adapters (the
same library names and ``--library`` hooks as ``dlpack-ref check``).

Modules: ``cases`` (what is measured, and the pre-flight probe of each call
in a child process), ``timing`` (interleaved wall-clock timing),
``callgrind`` (instructions per call), ``measure`` (a whole run, as the JSON
document ``bench.schema.json`` describes), ``report`` (table, Markdown and
JSON), ``chart`` (the heatmap). See docs/benchmarks.md.

Importing this package imports none of them: the counting child of
``callgrind`` starts with as little as it can.
"""
