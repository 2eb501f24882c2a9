"""The built wheel holds what ``pip install megadata-core`` must install, and nothing else.

Installed, the repository's short folders take our names alone: megadata_core/ ->
``megadata_core``, adapters/ -> ``megadata_adapters``, tools/cli/ -> ``megadata_cli``,
configs/ -> ``megadata_cli.configs``. pyproject.toml lists every package by hand (a
package-dir mapping rules out find), so these tests read the wheel itself:

* no top-level name but those three packages and the .dist-info folder (a stray
  ``adapters/`` or ``tools/`` would take a name on every user's sys.path);
* every .py of those four folders of the checkout is in the wheel under its installed
  name (a new subpackage left out of the list would ship without its files);
* nothing of tools/bench (tools/bench.py and tools/bench/) or tests/ ships;
* py.typed ships in each package; entry_points.txt names the 7 console scripts and the
  ``megadata.storage`` entry points, each pointing at a module in the wheel; the metadata
  admits, and its classifiers name, Python 3.11, 3.12 and 3.13.

The checks are pure functions of the wheel's file names and texts; the tests at the end
show each of them reporting a deliberately broken wheel. ``MEGADATA_WHEEL`` names the wheel
(tools/test.sh builds it, with the sdist, and sets it); without it one is built here.
"""

from __future__ import annotations

import configparser
import email.parser
import os
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PACKAGES = ("megadata_core", "megadata_adapters", "megadata_cli")
#: Checkout folder -> the folder it installs as.
SOURCES = {
    "megadata_core": "megadata_core",
    "adapters": "megadata_adapters",
    "tools/cli": "megadata_cli",
    "configs": "megadata_cli/configs",
}
#: Checkout files and folders that must not ship.
NOT_SHIPPED = ("tools/bench.py", "tools/bench", "tests")
DIST_INFO = re.compile(r"megadata_core-[^/-]+\.dist-info$")
CONSOLE_SCRIPTS = (
    "megadata-preprocess",
    "megadata-preprocess-fast",
    "megadata-build-index",
    "megadata-inspect",
    "megadata-merge",
    "megadata-megatron",
    "megadata-demo",
)
STORAGE_SCHEMES = ("s3", "gs", "gcs", "http", "https", "msc")
PYTHONS = ("3.11", "3.12", "3.13")


# -- the checks: pure functions of names and texts ---------------------------------------------


def stray_top_level(names: list[str]) -> list[str]:
    """Top-level names in the wheel that are not ours (sorted)."""
    tops = {name.split("/", 1)[0] for name in names}
    return sorted(top for top in tops if top not in PACKAGES and not DIST_INFO.match(top))


def installed_name(source: str) -> str | None:
    """Where the checkout file ``source`` (relative, '/'-separated) lands in the wheel, or
    None if it is not in a shipped folder."""
    for folder, installed in sorted(SOURCES.items(), key=lambda item: -len(item[0])):
        if source.startswith(folder + "/"):
            return installed + source[len(folder):]
    return None


def missing_sources(sources: list[str], names: list[str]) -> list[str]:
    """Checkout files of the shipped folders whose installed name is not in the wheel."""
    present = set(names)
    return sorted(s for s in sources if installed_name(s) not in present)


def leaked(names: list[str], excluded: list[str], sources: list[str]) -> list[str]:
    """Wheel names that are a file of tools/bench or tests/ (any checkout file of those,
    found by its path from the excluded folder's parent down, wherever it landed), other
    than the installed name of a shipped source."""
    expected = {installed_name(s) for s in sources}
    tails = set()
    for path in excluded:
        parts = path.split("/")
        start = 1 if parts[0] == "tools" else 0  # tools/bench/x.py -> bench/x.py
        tails.add("/".join(parts[start:]))
    found = []
    for name in names:
        if name in expected:
            continue
        if any(name == tail or name.endswith("/" + tail) for tail in tails):
            found.append(name)
    return sorted(found)


def missing_py_typed(names: list[str]) -> list[str]:
    present = set(names)
    return [package for package in PACKAGES if f"{package}/py.typed" not in present]


def _dist_info_file(names: list[str], leaf: str) -> str | None:
    for name in names:
        top, _, rest = name.partition("/")
        if DIST_INFO.match(top) and rest == leaf:
            return name
    return None


def entry_point_problems(entry_points: str, names: list[str]) -> list[str]:
    """What is wrong with entry_points.txt: a console script or storage scheme missing, or
    an entry point whose module is not in the wheel."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # keep names as written
    parser.read_string(entry_points)
    problems = []
    for group, wanted in (("console_scripts", CONSOLE_SCRIPTS),
                          ("megadata.storage", STORAGE_SCHEMES)):
        have = dict(parser.items(group)) if parser.has_section(group) else {}
        problems += [f"{group}: no {name!r}" for name in wanted if name not in have]
        for name, target in have.items():
            module = target.split(":", 1)[0].strip()
            path = module.replace(".", "/")
            if f"{path}.py" not in names and f"{path}/__init__.py" not in names:
                problems.append(f"{group}: {name} = {target}: module {module} not in the wheel")
    return problems


def metadata_problems(metadata: str, version: str) -> list[str]:
    """What is wrong with METADATA: name, version, Requires-Python, the classifiers."""
    from packaging.specifiers import SpecifierSet

    message = email.parser.Parser().parsestr(metadata)
    problems = []
    if message.get("Name") != "megadata-core":
        problems.append(f"Name is {message.get('Name')!r}, not 'megadata-core'")
    if message.get("Version") != version:
        problems.append(f"Version is {message.get('Version')!r}, not {version!r}")
    requires = message.get("Requires-Python")
    if requires is None:
        problems.append("no Requires-Python")
    else:
        specifier = SpecifierSet(requires)
        problems += [f"Requires-Python {requires} excludes {v}" for v in PYTHONS
                     if f"{v}.0" not in specifier]
    classifiers = set(message.get_all("Classifier") or [])
    problems += [f"no classifier for Python {v}" for v in PYTHONS
                 if f"Programming Language :: Python :: {v}" not in classifiers]
    return problems


def wheel_problems(names: list[str], texts: dict[str, str], sources: list[str],
                   excluded: list[str], version: str) -> list[str]:
    """Every problem of a wheel with file ``names`` (``texts``: the dist-info files
    METADATA and entry_points.txt, by leaf name)."""
    problems = [f"top-level name not ours: {top}" for top in stray_top_level(names)]
    problems += [f"not in the wheel: {s} (as {installed_name(s)})"
                 for s in missing_sources(sources, names)]
    problems += [f"must not ship: {name}" for name in leaked(names, excluded, sources)]
    problems += [f"no py.typed in {package}" for package in missing_py_typed(names)]
    for leaf in ("METADATA", "entry_points.txt"):
        if leaf not in texts:
            problems.append(f"no {leaf} in the .dist-info folder")
    if "entry_points.txt" in texts:
        problems += entry_point_problems(texts["entry_points.txt"], names)
    if "METADATA" in texts:
        problems += metadata_problems(texts["METADATA"], version)
    return problems


# -- the checkout and the wheel ---------------------------------------------------------------


def _files_under(path: str, suffix: str = ".py") -> list[str]:
    """'/'-separated paths, relative to the checkout, of the ``suffix`` files at ``path``
    (a file or a folder, walked; caches skipped)."""
    full = os.path.join(ROOT, path)
    if os.path.isfile(full):
        return [path] if path.endswith(suffix) else []
    found = []
    for folder, dirs, files in os.walk(full):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, ROOT).replace(os.sep, "/")
        found += [f"{rel}/{f}" for f in files if f.endswith(suffix)]
    return sorted(found)


def checkout_sources() -> list[str]:
    return [f for folder in SOURCES for f in _files_under(folder)]


def checkout_excluded() -> list[str]:
    return [f for path in NOT_SHIPPED for f in _files_under(path)]


def checkout_version() -> str:
    with open(os.path.join(ROOT, "megadata_core", "__init__.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__ = "([^"]+)"', f.read(), re.MULTILINE)
    assert match, "megadata_core/__init__.py: no __version__"
    return match.group(1)


def read_wheel(path: str) -> tuple[list[str], dict[str, str]]:
    """The wheel's file names and its dist-info METADATA / entry_points.txt texts."""
    with zipfile.ZipFile(path) as wheel:
        names = [n for n in wheel.namelist() if not n.endswith("/")]
        texts = {}
        for leaf in ("METADATA", "entry_points.txt"):
            name = _dist_info_file(names, leaf)
            if name is not None:
                texts[leaf] = wheel.read(name).decode("utf-8")
    return names, texts


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    path = os.environ.get("MEGADATA_WHEEL")
    if path:
        assert os.path.isfile(path), f"MEGADATA_WHEEL={path}: no such file"
        return path
    pytest.importorskip("build", reason="MEGADATA_WHEEL unset and no 'build' to make one")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), ROOT],
                   check=True, capture_output=True)
    (built,) = out.glob("*.whl")
    return str(built)


def test_checkout_has_the_shipped_folders():
    sources = checkout_sources()
    for folder in SOURCES:
        assert f"{folder}/__init__.py" in sources, folder
    assert any(f.startswith("tools/bench/") for f in checkout_excluded())


def test_the_wheel_holds_ours_alone(wheel):
    names, texts = read_wheel(wheel)
    problems = wheel_problems(names, texts, checkout_sources(), checkout_excluded(),
                              checkout_version())
    assert not problems, f"{os.path.basename(wheel)}:\n" + "\n".join(problems)


def test_the_wheel_is_pure_python(wheel):
    assert os.path.basename(wheel).endswith("-py3-none-any.whl"), wheel


# -- each check reports a deliberately broken wheel ---------------------------------------------


def _good_wheel() -> tuple[list[str], dict[str, str]]:
    """A wheel's names and texts as they should be, made from the checkout."""
    dist_info = "megadata_core-0.2.0.dist-info"
    names = [installed_name(s) for s in checkout_sources()]
    names += [f"{p}/py.typed" for p in PACKAGES]
    names += [f"{dist_info}/{leaf}" for leaf in ("METADATA", "entry_points.txt", "RECORD")]
    scripts = "\n".join(f"{s} = megadata_cli.build_index:cli" for s in CONSOLE_SCRIPTS)
    storage = "\n".join(f"{s} = megadata_adapters.storage.tensorstore_bins:open_source"
                        for s in STORAGE_SCHEMES)
    metadata = ("Metadata-Version: 2.4\nName: megadata-core\nVersion: 0.2.0\n"
                "Requires-Python: >=3.11\n"
                + "".join(f"Classifier: Programming Language :: Python :: {v}\n"
                          for v in PYTHONS))
    texts = {"METADATA": metadata,
             "entry_points.txt": f"[console_scripts]\n{scripts}\n\n"
                                 f"[megadata.storage]\n{storage}\n"}
    return names, texts


def _problems(names, texts) -> list[str]:
    return wheel_problems(names, texts, checkout_sources(), checkout_excluded(), "0.2.0")


def test_a_good_wheel_has_no_problem():
    assert _problems(*_good_wheel()) == []


def _zip(path, names: list[str], texts: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as wheel:
        for name in names:
            leaf = name.rsplit("/", 1)[-1]
            wheel.writestr(name, texts.get(leaf, "") if ".dist-info/" in name else "")
    return str(path)


def test_a_stray_top_level_package_is_reported(tmp_path):
    """The deliberate breakage: a fake wheel zip with the short folder names shipped as
    they are (``adapters/``, ``tools/x.py``, a top-level module)."""
    names, texts = _good_wheel()
    broken = names + ["adapters/__init__.py", "tools/x.py", "configs.py"]
    names_read, texts_read = read_wheel(_zip(tmp_path / "broken.whl", broken, texts))
    assert stray_top_level(names_read) == ["adapters", "configs.py", "tools"]
    problems = _problems(names_read, texts_read)
    assert "top-level name not ours: adapters" in problems
    assert "top-level name not ours: tools" in problems


def test_a_subpackage_left_out_is_reported():
    names, texts = _good_wheel()
    dropped = [n for n in names if not n.startswith("megadata_adapters/storage/")]
    problems = _problems(dropped, texts)
    assert "not in the wheel: adapters/storage/__init__.py (as " \
        "megadata_adapters/storage/__init__.py)" in problems
    # and the entry points into it no longer find their module
    assert any("megadata.storage: s3" in p and "not in the wheel" in p for p in problems)


def test_benchmarks_and_tests_shipping_are_reported():
    names, texts = _good_wheel()
    bench = next(f for f in checkout_excluded() if f.startswith("tools/bench/"))
    test = next(f for f in checkout_excluded() if f.startswith("tests/"))
    shipped = ["megadata_cli/" + bench[len("tools/"):], "megadata_cli/bench.py",
               "megadata_core/" + test]
    problems = _problems(names + shipped, texts)
    for name in shipped:
        assert f"must not ship: {name}" in problems


def test_missing_py_typed_entry_points_and_pythons_are_reported():
    names, texts = _good_wheel()
    names = [n for n in names if n != "megadata_cli/py.typed"]
    texts = dict(texts)
    texts["entry_points.txt"] = texts["entry_points.txt"].replace("megadata-demo = ", "x = ")
    texts["METADATA"] = (texts["METADATA"].replace(">=3.11", ">=3.11,<3.13")
                         .replace("Classifier: Programming Language :: Python :: 3.12\n", ""))
    problems = _problems(names, texts)
    assert "no py.typed in megadata_cli" in problems
    assert "console_scripts: no 'megadata-demo'" in problems
    assert "Requires-Python >=3.11,<3.13 excludes 3.13" in problems
    assert "no classifier for Python 3.12" in problems
