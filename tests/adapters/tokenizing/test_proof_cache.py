"""Load-time proofs' verdicts kept on disk (megadata_adapters.tokenizing.proof_cache): a stored
verdict is
reused without proving again, a changed tokenizer file misses it, and a damaged, foreign
or malformed cache file is ignored and rewritten."""

from __future__ import annotations

import json
import os
import stat

import pytest
import tokenizer_files as files

from megadata_adapters.tokenizing import byte_level_bpe, gigatoken_encoders, proof_cache
from megadata_adapters.tokenizing.text_tokenizers import build_tokenizer

pytest.importorskip("gigatoken", reason="the proof cache keeps gigatoken's proofs")


@pytest.fixture
def hf_tokenizer(tmp_path, monkeypatch):
    """A byte-level BPE tokenizer directory, and an empty cache of its own."""
    monkeypatch.setenv("MEGADATA_CACHE", str(tmp_path / "cache"))
    return files.write_hf_directory(str(tmp_path))


@pytest.fixture
def proofs(monkeypatch):
    """Counts of the proofs' costly checks run (each still runs for real)."""
    counts = {"canonical": 0, "battery": 0}

    def counted(name, module, attribute):
        original = getattr(module, attribute)

        def run(*args, **kwargs):
            counts[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, attribute, run)

    counted("canonical", byte_level_bpe, "_self_consistent")
    counted("battery", gigatoken_encoders, "battery")
    return counts


def _load(directory: str):
    return build_tokenizer("HuggingFaceTokenizer", tokenizer_model=directory)


def _cache_files() -> list[str]:
    directory = proof_cache.cache_dir()
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory))


def test_a_stored_verdict_is_reused(hf_tokenizer, proofs):
    first = _load(hf_tokenizer)
    assert first.block_encoder is not None and proofs == {"canonical": 1, "battery": 1}
    assert len(_cache_files()) == 1
    second = _load(hf_tokenizer)
    assert proofs == {"canonical": 1, "battery": 1}  # not proven again
    assert second.block_encoder is not None and second.encoder == first.encoder
    text = "Zürich, 東京 😀 the cat\t\n  </s>"
    assert (second.encode(text) == first.encode(text)).all()
    assert (second.encode(text) == second._reference(text)).all()


def test_a_changed_tokenizer_file_misses_the_cache(hf_tokenizer, proofs):
    _load(hf_tokenizer)
    path = os.path.join(hf_tokenizer, "tokenizer.json")
    with open(path, encoding="utf-8") as stream:
        config = json.load(stream)
    with open(path, "w", encoding="utf-8") as stream:  # the same tokenizer, other bytes
        json.dump(config, stream, indent=1)
    _load(hf_tokenizer)
    assert proofs == {"canonical": 2, "battery": 2}
    assert len(_cache_files()) == 2


@pytest.mark.parametrize("damage", [
    b"", b"{not json", b"[]", b'{"key": {}, "verdict": {"canonical": "", "gigatoken": ""}}',
    "key",  # the right key, a verdict with a missing field
    "type",  # the right key, a verdict field that is no string
])
def test_a_damaged_cache_file_is_recomputed(hf_tokenizer, proofs, damage):
    _load(hf_tokenizer)
    (path,) = _cache_files()
    with open(path, encoding="utf-8") as stream:
        stored = json.load(stream)
    if damage == "key":
        damage = json.dumps({"key": stored["key"], "verdict": {"gigatoken": ""}}).encode()
    elif damage == "type":
        damage = json.dumps({"key": stored["key"],
                             "verdict": {"canonical": "", "gigatoken": None}}).encode()
    with open(path, "wb") as stream:
        stream.write(damage)
    tokenizer = _load(hf_tokenizer)
    assert proofs == {"canonical": 2, "battery": 2}  # proven again
    assert tokenizer.block_encoder is not None
    with open(path, encoding="utf-8") as stream:
        assert json.load(stream) == stored  # and rewritten


def test_a_negative_verdict_is_kept_too(hf_tokenizer, proofs, monkeypatch):
    cache = os.environ["MEGADATA_CACHE"]
    monkeypatch.setattr(gigatoken_encoders, "battery", lambda *args, **kw: "they differ")
    first = _load(hf_tokenizer)
    assert first.block_encoder is None and "they differ" in first.encoder
    monkeypatch.undo()  # the real battery (which passes) back: the stored verdict wins
    monkeypatch.setenv("MEGADATA_CACHE", cache)
    second = _load(hf_tokenizer)
    assert second.block_encoder is None and "they differ" in second.encoder


def test_the_cache_file_follows_the_umask_and_can_be_turned_off(hf_tokenizer, monkeypatch):
    umask = os.umask(0o027)
    try:
        _load(hf_tokenizer)
    finally:
        os.umask(umask)
    (path,) = _cache_files()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    os.remove(path)
    monkeypatch.setenv("MEGADATA_PROOF_CACHE", "0")
    _load(hf_tokenizer)
    assert _cache_files() == []


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MEGADATA_CACHE", str(tmp_path / "mine"))
    assert proof_cache.cache_dir() == str(tmp_path / "mine" / "proofs")
    monkeypatch.delenv("MEGADATA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert proof_cache.cache_dir() == str(tmp_path / "xdg" / "megadata" / "proofs")


def test_a_cached_proof_defers_the_reference_tokenizer(hf_tokenizer):
    first = _load(hf_tokenizer)
    assert first._hf is not None and first.block_encoder.loaded_from == "file"
    second = _load(hf_tokenizer)
    assert second._hf is None  # its vocabulary was proven to be the file's own
    assert (second.vocab_size, second.eod_id) == (first.vocab_size, first.eod_id)
    text = "Zürich, 東京 😀 the cat\t\n  </s>"
    assert (second.encode(text) == first.encode(text)).all()
    assert second.decode(second.encode(text)) == first.decode(first.encode(text))
    assert second._hf is not None  # loaded on first use
    plain = build_tokenizer("huggingface", os.path.join(hf_tokenizer, "tokenizer.json"))
    assert plain._hf is None and plain.vocab_size == build_tokenizer(
        "huggingface", os.path.join(hf_tokenizer, "tokenizer.json"), encoder="reference"
    ).vocab_size


def test_a_vocabulary_the_reference_reads_otherwise_keeps_it_loaded(hf_tokenizer, monkeypatch):
    from megadata_adapters.tokenizing import text_tokenizers

    real = text_tokenizers._vocabulary
    monkeypatch.setattr(text_tokenizers, "_vocabulary", lambda config: {**real(config), "x": -1})
    first = _load(hf_tokenizer)
    (path,) = _cache_files()
    with open(path, encoding="utf-8") as stream:
        assert json.load(stream)["verdict"]["vocabulary"] != ""
    second = _load(hf_tokenizer)
    assert second._hf is not None and second.vocab_size == first.vocab_size


def test_gigatoken_falls_back_to_a_rebuilt_tokenizer_json(hf_tokenizer, monkeypatch):
    real = gigatoken_encoders._same_model
    calls = []

    def refuses_the_file(tokenizer, vocab, merges):
        calls.append(1)
        return len(calls) > 1 and real(tokenizer, vocab, merges)

    monkeypatch.setattr(gigatoken_encoders, "_same_model", refuses_the_file)
    first = _load(hf_tokenizer)
    assert len(calls) == 2 and first.block_encoder.loaded_from == "config"
    second = _load(hf_tokenizer)  # the verdict says what was proven: that is loaded
    assert len(calls) == 2 and second.block_encoder.loaded_from == "config"
    text = "the cat sat 😀"
    assert (second.encode(text) == second._reference(text)).all()
