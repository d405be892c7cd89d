# Sphinx configuration of the dlpack-ref documentation site
# (tools/build_docs.sh builds it with warnings as errors). The pages are the
# Markdown files of this folder, read by MyST; the API reference is autodoc
# of the installed package, so the compiled core must be installed: this
# file never puts the source tree on sys.path.
import importlib.metadata

project = "dlpack-ref"
author = "dlpack-ref developers"
copyright = "dlpack-ref developers"
release = importlib.metadata.version("dlpack-ref")
version = ".".join(release.split(".")[:2])

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Pages link to one another's sections by their titles.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# Docstrings are numpydoc-style (Parameters, Returns, Raises); the testing
# helpers use Google-style "Args:" sections, read too.
napoleon_google_docstring = True
napoleon_numpy_docstring = True
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "alabaster"
html_title = f"dlpack-ref {release}"
