"""A killed run leaves nothing corpus-like and its leftovers go with the next run; a live run's
work survives a concurrent run; unwritable outputs and missing zstandard are clear errors."""

from __future__ import annotations

import contextlib
import gc
import glob
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from preprocess_helpers import REPO, files_of

from megadata_core import DataError
from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl

HELPERS = pathlib.Path(__file__).resolve().parents[1] / "helpers"
# this checkout's code, not an installed one; tools/ for the tools' shared tool_main
TOOL_ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def run_preprocess_tool(*args, **kwargs):
    return subprocess.run(
        [sys.executable, str(REPO / "tools" / "preprocess_data.py"), *map(str, args)],
        capture_output=True, text=True, cwd=REPO, timeout=120, **{"env": TOOL_ENV, **kwargs},
    )

# preprocess_jsonl(argv[1] -> argv[2]) with the StallingTokenizer, 2 partitions.
_STALLING_RUN = """
import sys
from preprocess_helpers import StallingTokenizer
from megadata_core.preprocess import preprocess_jsonl
preprocess_jsonl([sys.argv[1]], sys.argv[2], StallingTokenizer, append_eod=True,
                 partitions=2, workers=int(sys.argv[3]), chunk_lines=2,
                 keep_sequential_samples=True)
"""


def _records(stall: bool) -> list[dict]:
    # 10 lines, 2 partitions of 5, chunks of 2: line 9 is in the fifth chunk, so shard 0's
    # documents are all written when the run stalls there
    texts = [f"document {i} " + "é" * i for i in range(10)]
    if stall:
        texts[8] = "STALL"
    return [{"text": t} for t in texts]


@contextlib.contextmanager
def _stalled_run(source, prefix, marker, workers):
    """A run in its own process group, yielded once it stalls with its work directory (the
    staging directory) planned."""
    env = {**os.environ, "STALL_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(HELPERS)])}
    process = subprocess.Popen(
        [sys.executable, "-c", _STALLING_RUN, source, str(prefix), str(workers)],
        cwd=REPO, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True,
    )
    try:
        shard0 = os.path.join(os.path.dirname(prefix), ".o.partial.*", "plan.json")
        deadline = time.monotonic() + 120  # a watchdog against hanging, not a timing check
        while not (marker.exists() and glob.glob(shard0)):
            if process.poll() is not None:
                raise AssertionError(f"the run ended early:\n{process.stderr.read()}")
            if time.monotonic() > deadline:
                raise AssertionError("the run never stalled")
            time.sleep(0.05)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # kill -9, workers included
        process.wait()
        process.stderr.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_killed_run_leaves_no_corpus_and_rerun_cleans_up(tmp_path, write_jsonl, workers):
    source = write_jsonl("stall.jsonl", _records(stall=True))
    clean = tmp_path / "clean"
    clean.mkdir()
    expected = files_of(preprocess_jsonl([source], str(clean / "o"), ByteTokenizer,
                                         append_eod=True).output_prefixes["text"])
    out = tmp_path / "out"
    out.mkdir()
    prefix = out / "o"
    with _stalled_run(source, prefix, tmp_path / "marker", workers) as stalled:
        (partial,) = os.listdir(out)
        assert partial.startswith(".o.partial.") and f".{stalled.pid}@" in partial
        # a concurrent run for the same output leaves the live run's directory alone
        other = write_jsonl("other.jsonl", [{"text": "another run"}])
        preprocess_jsonl([other], str(prefix), ByteTokenizer, partitions=2)
        assert sorted(os.listdir(out)) == sorted([partial, "o_text_document.bin",
                                                  "o_text_document.idx"])
        assert "plan.json" in os.listdir(out / partial)  # the run's work directory
    # killed after shard 0's documents were written: nothing but the hidden directory is left
    assert sorted(os.listdir(out)) == sorted([partial, "o_text_document.bin",
                                              "o_text_document.idx"])
    for name in ("o_text_document.bin", "o_text_document.idx"):
        os.remove(out / name)
    assert os.listdir(out) == [partial]

    summary = preprocess_jsonl([source], str(prefix), ByteTokenizer, append_eod=True,
                               partitions=2, workers=workers, chunk_lines=3,
                               keep_sequential_samples=True)
    assert sorted(os.listdir(out)) == ["o_text_document.bin", "o_text_document.idx"]
    assert files_of(summary.output_prefixes["text"]) == expected


def test_keep_partitions_get_their_names_only_at_the_end(tmp_path, write_jsonl):
    source = write_jsonl("in.jsonl", _records(stall=False))
    out = tmp_path / "out"
    out.mkdir()
    seen = []

    def progress(documents, nbytes):
        seen.append(sorted(os.listdir(out)))

    summary = preprocess_jsonl([source], str(out / "o"), ByteTokenizer, partitions=2,
                               keep_partitions=True, chunk_lines=2, progress=progress,
                               keep_sequential_samples=True)
    assert len(seen) == 5  # after each chunk of 2 of the 10 lines
    assert all(len(names) == 1 and names[0].startswith(".o.partial.") for names in seen)
    assert sorted(os.listdir(out)) == sorted(
        f"o_{part}_document.{ext}" for part in ("0_text", "1_text", "text")
        for ext in ("bin", "idx")
    )
    assert summary.partition_prefixes["text"] == [str(out / f"o_{k}_text_document")
                                                  for k in range(2)]
    mask = os.umask(0)
    os.umask(mask)
    assert {os.stat(out / name).st_mode & 0o777 for name in os.listdir(out)} == {0o666 & ~mask}


def _no_tokenizing():
    raise RuntimeError("the tokenizer was built before the output was checked")


def test_output_name_too_long_is_checked_before_tokenizing(tmp_path, write_jsonl):
    source = write_jsonl("in.jsonl", [{"text": "x"}])
    out = tmp_path / "out"
    out.mkdir()
    prefix = str(out / ("o" * 239))  # o..o_text_document.idx is 257 bytes
    with pytest.raises(DataError, match=r"output_prefix: file name 'o+_text_document\.idx' "
                                        r"is 257 bytes"):
        preprocess_jsonl([source], prefix, _no_tokenizing)
    with pytest.raises(DataError, match=r"'o+_\d_text_document\.idx' is 256 bytes"):
        preprocess_jsonl([source], str(out / ("o" * 236)), _no_tokenizing, partitions=2,
                         keep_partitions=True)
    assert os.listdir(out) == []


def test_output_directory_that_is_a_file(tmp_path, write_jsonl):
    source = write_jsonl("in.jsonl", [{"text": "x"}])
    (tmp_path / "file").write_text("")
    with pytest.raises(DataError, match=rf"directory {tmp_path}/file is not a directory"):
        preprocess_jsonl([source], str(tmp_path / "file" / "o"), _no_tokenizing)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_output_directory_in_process(tmp_path, write_jsonl):
    source = write_jsonl("in.jsonl", [{"text": "x"}])
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(DataError, match=rf"cannot write in directory {locked}: Permission"):
            preprocess_jsonl([source], str(locked / "o"), _no_tokenizing)
    finally:
        locked.chmod(0o755)


def _nobody_can_run_python() -> bool:
    if os.geteuid() != 0:
        return False  # only root may run a program as another user
    try:
        probe = subprocess.run([sys.executable, "-c", "import numpy, absl"], user=65534,
                               group=65534, cwd="/", capture_output=True, timeout=120)
    except OSError:
        return False
    return probe.returncode == 0


def test_cli_unwritable_system_directory(write_jsonl):
    """/sys takes no new files, not even root's: an unwritable directory for every user."""
    if not os.path.isdir("/sys") or _can_create_in("/sys"):
        pytest.skip("no /sys that refuses new files")
    source = write_jsonl("in.jsonl", [{"text": "x"}])
    result = run_preprocess_tool(f"--input={source}", "--output_prefix=/sys/megadata_o")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: output_prefix: cannot write in directory /sys: ")


def _can_create_in(directory: str) -> bool:
    try:
        path = tempfile.mkdtemp(dir=directory)
    except OSError:
        return False
    os.rmdir(path)
    return True


def test_cli_unwritable_output_directory_as_another_user(write_jsonl):
    """Run as root, the test runs the tool as user nobody: a directory nobody cannot write."""
    if not _nobody_can_run_python():
        pytest.skip("cannot run python as user nobody (not root, or python is out of reach)")
    shared = tempfile.mkdtemp(prefix="megadata-perm-")
    try:
        os.chmod(shared, 0o755)
        source = os.path.join(shared, "in.jsonl")
        shutil.copy(write_jsonl("in.jsonl", [{"text": "x"}]), source)
        os.chmod(source, 0o644)
        result = run_preprocess_tool(
            f"--input={source}", f"--output_prefix={shared}/o", user=65534, group=65534,
            env={"PATH": os.environ.get("PATH", ""), "HOME": shared, "PYTHONPATH": str(REPO)},
        )
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"error: output_prefix: cannot write in directory {shared}: Permission denied"
        ]
        assert sorted(os.listdir(shared)) == ["in.jsonl"]
    finally:
        shutil.rmtree(shared)


def test_merge_tool_unwritable_output_is_one_line_error(tmp_path, write_jsonl):
    source = write_jsonl("in.jsonl", [{"text": "x"}])
    corpus = preprocess_jsonl([source], str(tmp_path / "c"), ByteTokenizer).output_prefixes["text"]
    if not os.path.isdir("/sys") or _can_create_in("/sys"):
        pytest.skip("no /sys that refuses new files")
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "merge_datasets.py"), f"--input={corpus}",
         "--output_prefix=/sys/megadata_merged"],
        capture_output=True, text=True, cwd=REPO, timeout=120, env=TOOL_ENV,
    )
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: /sys/megadata_merged: cannot write in output directory /sys: ")


def test_cli_output_name_too_long_is_one_line_error(tmp_path, write_jsonl):
    source = write_jsonl("in.jsonl", [{"text": "x"}])
    result = run_preprocess_tool(f"--input={source}", f"--output_prefix={tmp_path / ('o' * 240)}")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: output_prefix: file name 'ooo")
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_zst_input_without_zstandard_names_file_and_extra(tmp_path, write_jsonl, load_tool,
                                                          monkeypatch):
    zst = write_jsonl("in.jsonl.zst", [{"text": "x"}])
    tool = load_tool("preprocess_data")
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now fails
    message = rf"{zst}: reading \.zst input needs the zstandard package.*megadata-core\[cli\]"
    with pytest.raises(DataError, match=message):
        tool.require_zstandard(zst)
    with pytest.raises(DataError, match=message):
        preprocess_jsonl([zst], str(tmp_path / "o"), ByteTokenizer, open_binary=tool.open_binary)
    assert os.listdir(tmp_path) == ["in.jsonl.zst"]
    gc.collect()  # the half-made reader is collected here: its close() must not raise


def test_cli_zst_input_without_zstandard_is_one_line_error(tmp_path, write_jsonl):
    zst = write_jsonl("in.jsonl.zst", [{"text": "x"}])
    plain = write_jsonl("in.jsonl", [{"text": "x"}])
    without_zstandard = (
        "import runpy, sys; sys.modules['zstandard'] = None; "
        "sys.argv = ['preprocess_data.py'] + sys.argv[1:]; "
        f"runpy.run_path({str(REPO / 'tools' / 'preprocess_data.py')!r}, run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", without_zstandard, f"--input={plain},{zst}",
         f"--output_prefix={tmp_path}/o"],
        capture_output=True, text=True, cwd=REPO, timeout=120, env=TOOL_ENV,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {zst}: reading .zst input needs the zstandard package; install it with "
        "pip install 'megadata-core[cli]' (or pip install zstandard)"
    ]
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl", "in.jsonl.zst"]


@pytest.mark.parametrize("moment", ["made", "exit"])
def test_ctrl_c_while_the_staging_directory_is_made_or_removed_leaves_nothing(
    tmp_path, write_jsonl, monkeypatch, moment
):
    """A KeyboardInterrupt right after the staging directory exists (inside its
    constructor), or in the block's exit before the removal: the directory goes too."""
    from megadata_core.preprocess import workdir as outputs

    source = write_jsonl("in.jsonl", [{"text": "abc"}] * 5)
    if moment == "made":
        create = outputs.temp_files.create_directory

        def create_then_interrupt(directory, label):
            create(directory, label)
            raise KeyboardInterrupt

        monkeypatch.setattr(outputs.temp_files, "create_directory", create_then_interrupt)
    else:
        def interrupted_removal(self):
            raise KeyboardInterrupt

        monkeypatch.setattr(outputs.Staging, "remove", interrupted_removal)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        preprocess_jsonl([source], str(tmp_path / "o"), ByteTokenizer)
    after = sorted(os.listdir(tmp_path))
    if moment == "exit":  # the outputs were published before the block's exit
        before += ["o_text_document.bin", "o_text_document.idx"]
    assert after == sorted(before)
