"""docs/trainers.md's table of parts names modules that are there: every trainer row's
module names (`` `name` `` outside parentheses) are modules of
``adapters/trainers/<trainer>/``, and every trainer package has a row."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINERS = ROOT / "adapters" / "trainers"


def _rows() -> dict[str, list[str]]:
    page = (ROOT / "docs" / "trainers.md").read_text()
    section = page.split("\n## The parts of a trainer integration\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        outside = [re.sub(r"\([^)]*\)", "", cell) for cell in cells[1:]]
        rows[cells[0].strip("`")] = [n for cell in outside for n in re.findall(r"`(\w+)`", cell)]
    return rows


def test_every_trainer_package_has_a_row_of_modules_that_exist():
    rows = _rows()
    packages = sorted(p.name for p in TRAINERS.iterdir() if (p / "__init__.py").is_file())
    assert sorted(rows) == packages
    for trainer, modules in rows.items():
        assert modules, trainer
        for module in modules:
            assert (TRAINERS / trainer / f"{module}.py").is_file(), (trainer, module)
