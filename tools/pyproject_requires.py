"""Print requirements from pyproject.toml, one a line, for `pip install -r`:
`build` for the build system's, or the name of an extra.

    python tools/pyproject_requires.py build
    python tools/pyproject_requires.py docs
"""

import pathlib
import sys
import tomllib

project = tomllib.loads((pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
which = sys.argv[1]
if which == "build":
    print("\n".join(project["build-system"]["requires"]))
else:
    print("\n".join(project["project"]["optional-dependencies"][which]))
