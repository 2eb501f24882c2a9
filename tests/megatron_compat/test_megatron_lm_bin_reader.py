"""Megatron-LM's own ``tests/unit_tests/data/test_bin_reader.py`` through the drop-in,
with no variable set: its ``s3://`` half reaches its patched ``boto3.client``.

``megatron_lm/test_bin_reader.py.megatron`` is Megatron-LM's file as it is at
core_v0.16.1 and at core_v0.19.0 (the same blob, e479676ac4be966e85e30bad848228407f106d67;
Megatron-LM's license, BSD-3-Clause). It runs from a temporary tree laid out as
Megatron-LM's (``tests/unit_tests/data/``), its ``test_preprocess_data`` helpers replaced
by ``megatron_lm/preprocess_stand_in.py``, which writes the same corpora without
downloading the GPT-2 tokenizer. ``megatron_lm/drop_in_conftest.py``, its conftest.py,
fails the run unless the drop-in served ``megatron.core.datasets`` and a ``.bin`` was
read through boto3. It runs against the megatron-core on the path: 0.16.1 in .venv, and
0.19.2 in tools/test.sh's second pass of tests/megatron_compat.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nltk", reason="Megatron-LM's test_bin_reader imports nltk")
pytest.importorskip("boto3", reason="the drop-in reads s3:// through boto3")

HERE = Path(__file__).parent / "megatron_lm"
MEGATRONS_FILE = HERE / "test_bin_reader.py.megatron"
BLOB = "e479676ac4be966e85e30bad848228407f106d67"  # git's id of the file at both tags


def test_the_file_is_megatrons():
    data = MEGATRONS_FILE.read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == BLOB


def test_megatrons_test_bin_reader_passes_through_the_drop_in(tmp_path):
    tree = tmp_path / "Megatron-LM"
    data = tree / "tests" / "unit_tests" / "data"
    data.mkdir(parents=True)
    for package in (tree / "tests", tree / "tests" / "unit_tests", data):
        (package / "__init__.py").write_text("")
    shutil.copyfile(MEGATRONS_FILE, data / "test_bin_reader.py")
    shutil.copyfile(HERE / "preprocess_stand_in.py", data / "test_preprocess_data.py")
    shutil.copyfile(HERE / "drop_in_conftest.py", tree / "conftest.py")
    env = {k: v for k, v in os.environ.items() if k != "MEGADATA_S3_CLIENT"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree)] + [p for p in [env.get("PYTHONPATH")] if p])
    done = subprocess.run(
        [sys.executable, "-m", "megadata_adapters.trainers.megatron_datasets", "-m", "pytest",
         "-p", "no:cacheprovider", "-q", "-s", "--rootdir", str(tree), "-p", "no:xdist",
         str(data / "test_bin_reader.py")],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "1 passed" in output and "drop-in: " in output, output[-4000:]
