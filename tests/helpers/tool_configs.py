"""Config files for the tools' ``--config`` flag (ml_collections ``get_config`` modules
built on ``tools/data_config.base_config``), written by the tool tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_tool_config(path: Path, body: str, cache: Path) -> Path:
    """``path``: a config module setting ``path_to_cache`` to ``cache``, then the lines of
    ``body`` (statements on ``c``, the config; indented as you like) in order."""
    path.write_text(
        "import sys\n"
        "from megadata_cli.data_config import base_config\n\n"
        "def get_config():\n"
        "    c = base_config()\n"
        f"    c.path_to_cache = {str(cache)!r}\n"
        + "".join(f"    {line}\n" for line in textwrap.dedent(body).strip().splitlines())
        + "    return c\n"
    )
    return path
