"""install() and ``python -m megadata_adapters.trainers.megatron_datasets``, in fresh
interpreters."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

LAUNCHER = "megadata_adapters.trainers.megatron_datasets"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = textwrap.dedent(
    """
    import sys
    import megatron.core.datasets as package
    from megatron.core.datasets import gpt_dataset, blended_megatron_dataset_builder, utils
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    import megatron.core.datasets.megatron_tokenizer as unmirrored
    print(gpt_dataset.__name__, gpt_dataset.GPTDataset.__module__)
    print(IndexedDataset.__module__)
    print(unmirrored.__file__.endswith("megatron_tokenizer.py"))
    print(getattr(package, "__megadata__", False), sys.argv[1:])
    """
)


def _run(args: list[str], tmp_path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_script_runs_with_megadata_installed(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    lines = _run(["-m", LAUNCHER, "probe.py", "--flag", "1"], tmp_path)
    assert lines == [
        f"{LAUNCHER}.gpt_dataset {LAUNCHER}.gpt_dataset",
        "megadata_adapters.trainers.megatron_datasets.indexed_dataset",
        "True",
        "True ['--flag', '1']",
    ]


def test_module_form_and_install_after_megatron_was_imported(tmp_path):
    (tmp_path / "probe_module.py").write_text(
        "import megatron.core.datasets.utils as before\n"
        "from megadata_adapters.trainers.megatron_datasets import install\n"
        "install()\n" + PROBE
    )
    lines = _run(["-m", LAUNCHER, "-m", "probe_module", "x"], tmp_path)
    assert lines[0].startswith("megadata_adapters.trainers.megatron_datasets.gpt_dataset")
    assert lines[-1] == "True ['x']"


def test_without_install_megatron_core_is_untouched(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    lines = _run(["probe.py"], tmp_path)
    assert lines[0] == "megatron.core.datasets.gpt_dataset megatron.core.datasets.gpt_dataset"
    assert lines[-1] == "False []"


def test_an_unimportable_megatron_core_is_reported_as_it_is(tmp_path):
    """megatron-core installed but failing at import (a CPU box without triton): the
    launcher says so in one line with the original error, instead of serving an empty
    ``megatron.core`` that fails later naming nothing."""
    site = tmp_path / "site"
    (site / "megatron" / "core").mkdir(parents=True)
    (site / "megatron" / "__init__.py").write_text("")
    (site / "megatron" / "core" / "__init__.py").write_text("import triton_is_not_here\n")
    (tmp_path / "probe.py").write_text("from megatron.core import mpu\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), ROOT]))
    done = subprocess.run(
        [sys.executable, "-m", LAUNCHER, "probe.py"], cwd=tmp_path,
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: megatron.core (installed at ")
    assert "cannot be imported: ModuleNotFoundError: No module named 'triton_is_not_here'" in (
        lines[0]
    )
