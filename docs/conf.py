"""Sphinx configuration of the megadata docs: Markdown pages (MyST) and an API reference
made by autodoc from the docstrings (reStructuredText). Built by ``bash tools/docs.sh``."""

from __future__ import annotations

import os
import sys

import megadata_core

# docs/module_tables.py: the layout page's tables, made from the code at each build.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# JAX reads this when the adapters' API pages import it (the docs' examples assume 8 CPU
# devices); set before any import of jax.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

project = "megadata"
author = "the megadata authors"
copyright = "the megadata authors"
release = megadata_core.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",  # the docstrings' "Args:" / "Returns:" sections (Google style)
    "module_tables",  # {layout-floors} and {layout-modules} of docs/layout.md
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: anchors for headings down to ###, so [text](page.md#a-heading) resolves.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# autodoc: signatures as written, members in source order, the docstrings as they are
# (reStructuredText). The modules are imported: build in an environment with `.[all,docs]`.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"megadata {release}"
pygments_style = "sphinx"
