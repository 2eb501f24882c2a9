"""README.md is the front door: short, its two newcomer commands, a map of the docs.

Its ```python and ```bash blocks run with the docs pages' in tests/tools/test_docs_blocks.py
(README.md first in the chain).
"""

from __future__ import annotations

import re

import pytest
from test_docs_blocks import ROOT, is_setup, page_blocks

README = ROOT / "README.md"
MAX_LINES = 250


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= MAX_LINES


def test_readme_has_a_runnable_example():
    assert any(language == "python" for language, _, _ in page_blocks("README.md"))


def test_readme_has_exactly_two_newcomer_commands():
    setups = [code for language, code, _ in page_blocks("README.md") if is_setup(code)]
    assert len(setups) == 1
    commands = [line.split("#")[0].strip() for line in setups[0].splitlines() if line.strip()]
    assert commands == ["bash tools/demo.sh", "bash tools/test.sh"]
    assert all((ROOT / command.split()[1]).is_file() for command in commands)


def test_readme_says_how_to_use_the_environment():
    text = README.read_text()
    assert "source .venv/bin/activate" in text and ".venv/bin/megadata-" in text


@pytest.mark.parametrize(
    "tool", sorted(set(re.findall(r"(?<![\w/])tools/\w+\.(?:py|sh)", README.read_text())))
)
def test_readme_names_only_tools_that_exist(tool):
    assert (ROOT / tool).is_file(), tool


@pytest.mark.parametrize(
    "target", sorted(set(re.findall(r"\]\((docs/[^)#\s]+)", README.read_text())))
)
def test_readme_links_to_pages_that_exist(target):
    assert (ROOT / target).is_file(), target


def test_readme_maps_every_page():
    linked = set(re.findall(r"\]\(docs/([^)#\s]+\.md)", README.read_text()))
    pages = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")
             if "_build" not in path.parts and path.name != "index.md"}
    assert pages <= linked, sorted(pages - linked)


def test_readme_names_every_extra():
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = re.findall(r"^([\w-]+) = ", section, re.MULTILINE)
    assert "docs" in extras
    text = README.read_text()
    for extra in extras:
        assert f"| `{extra}` |" in text, extra


def test_docs_images_exist():
    for page in [README, *(ROOT / "docs").rglob("*.md")]:
        for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text()):
            assert (page.parent / image).is_file(), (page, image)
