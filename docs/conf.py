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

# The theme of NumPy's, SciPy's and pandas' sites (the `docs` extra). Every
# page must fit a 1280 px laptop window: the site's pages in the left
# column (the current page's sections under it) instead of a header bar and
# a right-hand column, so that the content column is about 1000 px wide;
# _static/dlpack-ref.css fits the wide tables and code to it.
# tools/check_docs_render.py renders the pages in headless Chromium and
# fails on anything that spills out, scrolls sideways or is shrunk.
html_theme = "pydata_sphinx_theme"
html_title = f"dlpack-ref {release}"
html_static_path = ["_static"]
html_css_files = ["dlpack-ref.css"]
html_theme_options = {
    "navbar_center": [],
    "secondary_sidebar_items": [],
    "globaltoc_maxdepth": 2,
    "globaltoc_collapse": True,
    "globaltoc_includehidden": True,
}
html_sidebars = {"**": ["globaltoc.html"]}
