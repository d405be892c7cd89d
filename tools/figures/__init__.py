"""The parts of tools/docs_figures.py, one concept a module: the checkout and
its result files (checkout), the marker engine (markers), the runs behind the
files (provenance), the renderers of each result file (render_*), the lint of
measurements outside the blocks (lint), the ecosystem page's findings
(findings), the status of each file (status), and the known libraries as
their files declare them (libraries, rendered by render_libraries)."""
