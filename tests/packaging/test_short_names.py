"""Every short name of ``megadata_adapters`` imports both ways, as the module it stands for.

``import megadata_adapters.grain_source`` and ``from megadata_adapters import grain_source``
give the one module object that ``megadata_adapters.frameworks.grain_source`` is (its
``__name__`` and ``__spec__`` its own), and so for every name of ``SHORT_NAMES`` and for the
old home of a moved module (``megadata_adapters.frameworks.maxtext_keys``). Where a name's
framework is not installed, both spellings raise the ImportError the module itself does.
``import megadata_adapters`` alone imports no framework. Each check runs in a fresh
interpreter, so that nothing imported before it counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from megadata_adapters import ALIASES, SHORT_NAMES

FRAMEWORKS = ("grain", "jax", "torch", "tensorstore", "multistorageclient", "megatron")

CHECK = """
import importlib, json, sys
alias, name, how, frameworks = sys.argv[1:]
import megadata_adapters
found = {"loaded": sorted(m for m in frameworks.split(",") if m in sys.modules)}
try:
    if how == "import":
        module = importlib.import_module(alias)
    else:
        parent, _, short = alias.rpartition(".")
        module = getattr(__import__(parent, fromlist=[short]), short)
except ImportError as error:
    found["error"] = type(error).__name__
else:
    real = importlib.import_module(name)
    found.update(same=module is real, registered=sys.modules.get(alias) is real,
                 name=module.__name__, spec=module.__spec__.name)
print(json.dumps(found))
"""


def _framework_missing(name: str) -> bool:
    done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True,
                          text=True, timeout=300)
    return "ModuleNotFoundError" in done.stderr or "ImportError" in done.stderr


CASES = [
    (alias, name, how)
    for alias, name in sorted(ALIASES.items())
    for how in ("import", "from")
]


def _run(alias: str, name: str, how: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHECK, alias, name, how, ",".join(FRAMEWORKS)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_short_name_has_an_alias():
    assert {f"megadata_adapters.{short}" for short in SHORT_NAMES} <= set(ALIASES)
    assert ALIASES["megadata_adapters.frameworks.maxtext_keys"] == (
        "megadata_adapters.trainers.maxtext.keys"
    )
    with pytest.raises(ModuleNotFoundError):
        import megadata_adapters.no_such_room  # noqa: F401


@pytest.mark.parametrize(("alias", "name", "how"), CASES,
                         ids=[f"{how}-{alias}" for alias, _, how in CASES])
def test_a_short_name_imports_both_ways(alias, name, how):
    found = _run(alias, name, how)
    assert found["loaded"] == []  # `import megadata_adapters` imported no framework
    if "error" in found:  # a framework is not installed: the module itself fails too
        assert _framework_missing(name), found
        return
    assert found["same"] and found["registered"]
    assert found["name"] == found["spec"] == name


def test_a_name_under_an_alias_is_the_module_under_its_own_name():
    """A submodule reached through an alias is not loaded a second time."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import megadata_adapters.megatron_datasets.gpt_dataset as a\n"
         "import megadata_adapters.trainers.megatron_datasets.gpt_dataset as b\n"
         "print(a is b, a.__name__)"],
        capture_output=True, text=True, timeout=300,
    )
    if "ModuleNotFoundError" in done.stderr or "ImportError" in done.stderr:
        pytest.skip(f"the drop-in does not import here: {done.stderr.splitlines()[-1]}")
    assert done.stdout.split() == [
        "True", "megadata_adapters.trainers.megatron_datasets.gpt_dataset"
    ]
