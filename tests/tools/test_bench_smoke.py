"""tools/bench.py runs end to end at a tiny scale and prints its table (no timing asserts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run_suite(suite: str, tmp_path: Path, *extra: str) -> str:
    """Run ``bench.py SUITE`` at scale 0.01; check exit 0, no failed check and a clean
    scratch directory; return its stdout."""
    command = [
        sys.executable,
        str(ROOT / "tools" / "bench.py"),
        suite,
        "--scale",
        "0.01",
        "--repeats",
        "1",
        "--workdir",
        str(tmp_path),
        *extra,
    ]
    process = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert process.returncode == 0, process.stdout + process.stderr
    out = process.stdout
    assert out.startswith("command: ")
    assert f"suite {suite}: scale 0.01" in out
    assert ": NO" not in out
    assert os.listdir(tmp_path) == [], "the scratch directory was not cleaned up"
    return out


def test_bench_format_smoke(tmp_path):
    out = _run_suite("format", tmp_path)
    assert out.startswith("command: ")
    assert "environment: " in out and "numpy " in out
    for metric in (
        "writer add_document",
        "finalize, ",
        ": peak RSS (MiB)",
        ": peak RSS above imports (MiB)",
        ": time (s)",
        "preprocess jsonl",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    assert "check " in out and ": NO" not in out


def test_bench_preprocess_peers_smoke(tmp_path):
    pytest.importorskip("gigatoken")
    pytest.importorskip("sentencepiece")
    out = _run_suite("preprocess", tmp_path, "--only", "peers,rss-2g,large")
    for metric in (
        "MB of real text: ours 1 worker vs gigatoken whole file, end to end (MB/s)",
        "byte-level BPE 32k: ours 1 worker vs gigatoken whole file, end to end (MB/s)",
        "SentencePiece BPE 16k: ours 2 workers vs gigatoken whole file, end to end (MB/s)",
        "peak RSS above imports, ours 1 worker vs gigatoken (MiB)",
        "ours 2 workers vs Megatron's preprocess_data.py loop, 2 workers (MB/s)",
        "input: peak RSS, ours 1 worker vs gigatoken (MiB)",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    assert "check preprocess byte-level BPE 32k: gigatoken corpus == ours 1 worker: yes" in out
    assert "where the time goes (s): ours, one thread: load (proof)" in out


def test_bench_preprocess_small_smoke(tmp_path):
    pytest.importorskip("gigatoken")
    pytest.importorskip("sentencepiece")
    out = _run_suite("preprocess", tmp_path, "--only", "small")
    for label in ("byte-level BPE 32k", "SentencePiece BPE 16k identity",
                  "SentencePiece BPE 16k nmt_nfkc"):
        for workers in ("1 worker", "2 workers"):
            assert f"{label}: ours {workers} vs gigatoken whole file (MB/s)" in out, out
    for label in ("SentencePiece BPE 16k identity", "SentencePiece BPE 16k nmt_nfkc"):
        assert f"{label}: ours corpus == sentencepiece's own (--encoder reference): yes" in out
    assert "byte-level BPE 32k: gigatoken corpus == ours 1 worker: yes" in out


def test_bench_preprocess_encoders_smoke(tmp_path):
    pytest.importorskip("gigatoken")
    pytest.importorskip("sentencepiece")
    out = _run_suite("preprocess", tmp_path, "--only", "encoders")
    assert "ours 1 worker, gigatoken vs the reference encoder, end to end (MB/s)" in out
    assert "check encoders: TikTokenizer v2, " in out
    assert "ranks, gigatoken's corpus == the reference encoder's: yes" in out


def test_bench_gpt_smoke(tmp_path):
    out = _run_suite("gpt", tmp_path)
    assert out.startswith("command: ")
    assert "suite gpt: scale 0.01" in out
    for metric in (
        "ours (megatron shuffle): time (s)",
        "ours (megatron shuffle): peak RSS (MiB)",
        "ours (megatron shuffle): peak RSS above imports (MiB)",
        "ours (feistel shuffle): time (s)",
        "epochs (", "all threads (s)", "1 thread (s)",  # sample_index beside build_sample_idx
        "read 32 x 4097 tokens, hot page cache (samples/s)",
        "read: ours / raw piece copy (throughput)",
        "cache-hit load of the build index, ours (megatron shuffle) (ms)",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    assert "note: build plan: " in out and "separate_final_epoch=True" in out
    assert "check " in out and ": NO" not in out


def test_bench_builder_smoke(tmp_path):
    out = _run_suite("builder", tmp_path)
    assert "suite builder: scale 0.01" in out
    for metric in (
        "builder cold start, fresh cache, 10 prefixes x 200 docs (s)",
        "builder warm start, cache hit, 10 prefixes x 200 docs (s)",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    assert "check builder: " in out and ": NO" not in out


def test_bench_blend_smoke(tmp_path):
    out = _run_suite("blend", tmp_path)
    assert "suite blend: scale 0.01" in out
    for metric in (
        "balanced order vs Megatron build_blending_indices, 0.5M samples, 4 datasets (s)",
        "megatron order vs Megatron build_blending_indices, 0.5M samples, 4 datasets (s)",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    assert "check megatron order equals Megatron's values: yes" in out
    assert "check balanced order max prefix deviation < 1: yes" in out
    assert ": NO" not in out and "note: max prefix deviation" in out


def test_bench_loaders_smoke(tmp_path):
    out = _run_suite("loaders", tmp_path)
    assert "suite loaders: scale 0.01" in out
    for metric in (
        "loader (a) raw core __getitems__ loop, 32 x 4096+1 (tokens/s)",
        "loader (b) Grain MapDataset.batch + mp_prefetch, 2 workers",
        "loader (c) grain_source.batched_dataset, 2 workers",
        "loader (d) torch DataLoader + PretrainingSampler, 2 workers",
        "loader (e) raw loop + jax global_batch, 8-device CPU mesh",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    for path in ("grain-map", "grain-batched", "torch", "jax"):
        assert f"check loader {path}: first 3 batches' tokens equal" in out, out
    assert ": NO" not in out and "note: loaders start-up" in out


def test_bench_cloud_smoke(tmp_path, tmp_path_factory, monkeypatch):
    # The corpus goes to the bench cache (written once), not the scratch directory.
    monkeypatch.setenv("MEGADATA_BENCH_CACHE", str(tmp_path_factory.mktemp("bench_cache")))
    out = _run_suite("cloud", tmp_path)
    rows = [
        "first batch, cold .idx cache (gcs; no peer) (s)",
        "gcs: shuffled 32x4097 batches, peer = GCS client range reads x16 (tokens/s)",
        "gcs: requests per batch at the proxy",
        "gcs: client CPU per batch",
        "gcs: loopback store CPU per batch (server + proxy)",
        "gcs: shuffled 32x4097 batches, ours with 256 requests in flight",
        "note: gcs: loopback store CPU per request (server + proxy): ours ",
    ]
    readers = ["ours", "ours, 256 in flight", "google-cloud-storage"]
    if "note: s3: skipped, s3rver is not available" not in out:  # node/npm present
        rows += [
            "s3: shuffled 32x4097 batches, peer = boto3 range GETs x16 (tokens/s)",
            "s3: shuffled 32x4097 batches, peer = megatron _S3BinReader (tokens/s)",
            "first batch, cold .idx cache (s3; megatron: open + its batch rate) (s)",
            "s3: requests per batch at the proxy, peer = megatron",
            "s3: loopback store CPU per batch (server + proxy)",
            "s3: shuffled 32x4097 batches, ours with 256 requests in flight",
        ]
        readers += ["boto3 pool", "megatron _S3BinReader"]
    for metric in rows:
        assert metric in out, f"missing row {metric!r}:\n{out}"
    for reader in readers:
        assert f"first batch equals the local corpus ({reader}): yes" in out, out


def test_bench_megatron_smoke(tmp_path):
    out = _run_suite("megatron", tmp_path)
    for metric in ("cold", "warm", "__getitem__"):
        assert metric in out, f"missing row {metric!r}:\n{out}"


def test_bench_packing_smoke(tmp_path):
    out = _run_suite("packing", tmp_path)
    for metric in (
        "padding, demo corpus, 0.1k docs, peer = Grain BestFit (%)",
        "padding, lognormal, 0.5k docs, peer = lower bound (%)",
        "documents cut, lognormal, 0.5k docs, peer = concat (docs)",
        "best_fit (peer = concat): time (s)",
        "best_fit (peer = concat): peak RSS (MiB)",
        "best_fit __getitems__ (peer = concat __getitems__) (tokens/s)",
        "best_fit __getitems__ (peer = Grain BestFit iterator) (tokens/s)",
        # OLMo-core: a figure when its overlay venv exists in the bench cache, else n/a
        "padding, lognormal, 0.5k docs, S = 4096, peer = OLMo-core packed (%)",
        "best_fit (peer = OLMo-core NumpyPackedFSLDataset): time (s)",
        "best_fit (peer = OLMo-core NumpyPackedFSLDataset): peak RSS (MiB)",
        "THD padding, lognormal, 0.5k docs, cp 8 (alignment 16), peer = ours unaligned (%)",
        "THD padding, demo corpus, 0.1k docs, cp 2 (alignment 4), peer = Megatron's "
        "per-batch rule (%)",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    assert "check documents cut, lognormal: only those longer than 4097" in out
    assert ": NO" not in out and "note: OLMo-core" in out


def test_bench_scale_smoke(tmp_path):
    """The scale suite at 10,000 documents: every side builds, starts and reads."""
    command = [sys.executable, str(ROOT / "tools" / "bench.py"), "scale", "--scale", "0.001",
               "--repeats", "1", "--only", "10M", "--workdir", str(tmp_path)]
    process = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert process.returncode == 0, process.stdout + process.stderr
    out = process.stdout
    for row in ("10M feistel: build (s)", "10M feistel: peak RssAnon (GiB)",
                "10M feistel: warm start",
                "10M feistel: warm start, index lookups (first pass): major page faults"):
        assert row in out, f"missing row {row!r}:\n{out}"
    assert ": NO" not in out
    assert os.listdir(tmp_path) == [], "the scratch directory was not cleaned up"


def test_bench_walk_counts_the_build(tmp_path):
    """The walk suite follows a real cold build: the config's path enters the builder's
    module and gpt_dataset.py, and every frame walks many more stops than the config's."""
    out = _run_suite("walk", tmp_path)
    counts = {}
    for line in out.splitlines():
        if line.startswith("walk, ") and "(count)" in line:
            name, rest = line.split(" (count)")
            counts[name] = float(rest.split()[0])
    calls = "walk, config's path, calls"
    assert counts[f"{calls}: builder.py entries"] >= 1
    assert counts[f"{calls}: gpt_dataset entries"] >= 1
    assert counts["walk, every frame, calls and returns: stops"] > counts[f"{calls}: stops"]
    assert "config's path, calls, first stops: build/builder.py > build/plan.py" in out


def test_bench_schedule_smoke(tmp_path):
    out = _run_suite("schedule", tmp_path)
    for metric in (
        "2nd-half samples with a token already trained on (samples)",
        "already-trained tokens served again in the 2nd half (tokens)",
        "member samples skipped (read past, never served) (samples)",
        "schedule: build_datasets cold, 20 stages vs static blend",
        "schedule: 200 random batches of 32 (__getitems__)",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    assert "check schedule: the edited schedule serves no token twice and skips none: yes" in out
    # Levanter: figures when its overlay venv exists in the bench cache, else n/a and why
    assert "note: schedule: Levanter (" in out
    assert "check schedule: Levanter's staged mixture serves no (dataset, index) twice" in out


def test_bench_stream_smoke(tmp_path):
    out = _run_suite("stream", tmp_path, "--sizes", "85M")
    for metric in (
        "first batch 32x4097, ",
        "ours vs megadata-preprocess --workers 2 + build_datasets (s)",
        "background tokenizer, workers=2",
        "headroom over a 200,000 tokens/s trainer",
        "distinct shard files per batch of 256 samples",
        "mean |served rank - file rank| / N",
    ):
        assert metric in out, f"missing row {metric!r}:\n{out}"
    assert "check shuffle: each piece is in one window of the epoch: yes" in out
