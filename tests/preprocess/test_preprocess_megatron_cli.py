"""tools/preprocess_data.py run with Megatron-LM's command lines: its flags, types and files."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import tokenizer_files as files
from preprocess_helpers import REPO, read_documents

from megadata_adapters.tokenizing.sentence_splitters import SentencexSplitter
from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

TEXTS = ["Hello world. Second sentence here!", "", "Zürich und 東京.\nNew line? Yes.", "x"]

# runs the tool as __main__ (its own flag parsing), optionally with sentencex uninstalled
_RUN = """
import runpy, sys
if sys.argv[1] == "no-sentencex":
    sys.modules["sentencex"] = None
sys.argv = ["tools/preprocess_data.py", *sys.argv[2:]]
runpy.run_path("tools/preprocess_data.py", run_name="__main__")
"""


def run(*args, sentencex=True, env=None):
    return subprocess.run(
        [sys.executable, "-c", _RUN, "yes" if sentencex else "no-sentencex", *map(str, args)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO),
             "NLTK_DATA": "/nonexistent", **(env or {})},
    )


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return files.write_gpt2_files(str(tmp_path_factory.mktemp("gpt2")))


@pytest.fixture
def corpus(write_jsonl):
    return write_jsonl("in.jsonl", [{"text": t, "title": t[:5]} for t in TEXTS])


def test_megatron_command_line(tmp_path, gpt2, corpus):
    out = tmp_path / "out"
    out.mkdir()
    result = run(
        "--input", corpus, "--output-prefix", out / "c", "--tokenizer-type", "GPT2BPETokenizer",
        "--vocab-file", gpt2[0], "--merge-file", gpt2[1], "--json-keys", "text", "title",
        "--append-eod", "--workers", "2", "--log-interval", "1000", "--noprogress",
    )
    assert result.returncode == 0, result.stderr
    tokenizer = load_tokenizer("GPT2BPETokenizer", vocab_file=gpt2[0], merge_file=gpt2[1])
    for key, texts in (("text", TEXTS), ("title", [t[:5] for t in TEXTS])):
        expected = [[tokenizer.encode(t).tolist() + [tokenizer.eod_id]] if t else []
                    for t in texts]
        assert read_documents(str(out / f"c_{key}_document")) == expected
    umask = os.umask(0)
    os.umask(umask)
    modes = {oct(os.stat(out / name).st_mode & 0o777) for name in os.listdir(out)}
    assert modes == {oct(0o666 & ~umask)} and len(os.listdir(out)) == 4
    # the log names the encoder: trained merges are canonical, so gigatoken (when installed,
    # else tiktoken) encodes them
    assert ("encoder: gigatoken (canonical byte-level BPE merges" in result.stderr
            or "encoder: tiktoken (canonical byte-level BPE merges" in result.stderr)


def test_split_sentences_offline_in_one_run(tmp_path, corpus):
    out = tmp_path / "out"
    out.mkdir()
    result = run("--input", corpus, "--output-prefix", out / "c", "--split-sentences",
                 "--keep-newlines", "--append-eod", "--noprogress")
    assert result.returncode == 0, result.stderr
    assert "sentence splitter: sentencex (en)" in result.stderr
    assert sorted(os.listdir(out)) == ["c_text_sentence.bin", "c_text_sentence.idx"]
    splitter = SentencexSplitter("english", keep_newlines=True)
    documents = read_documents(str(out / "c_text_sentence"))
    assert [len(d) for d in documents] == [len(splitter.split(t)) for t in TEXTS] == [2, 0, 3, 1]
    assert bytes(documents[2][0]).decode() == "Zürich und 東京.\n"
    assert documents[0][1][-1] == 256


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tokenizer-type", "GPT2Tokenizer"], "--tokenizer_type=GPT2Tokenizer"),
        (["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "{dir}/missing.json",
          "--merge-file", "{merges}"], "--vocab-file .*missing.json: GPT-2 vocab.json file "
                                       "not found"),
        (["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "{merges}", "--merge-file",
          "{merges}"], "--vocab-file .*merges.txt: not a GPT-2 vocab.json"),
        (["--tokenizer-type", "BertWordPieceCase", "--vocab-file", "{vocab}"],
         "--vocab-file .*vocab.json: looks like a JSON vocabulary"),
        (["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", "{vocab}"],
         "--tokenizer-model .*vocab.json: not a SentencePiece model"),
        (["--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", "{vocab}",
          "--legacy-tokenizer"], "--legacy-tokenizer: not supported with Llama2Tokenizer"),
        (["--vocab-file", "{vocab}"], "--vocab_file: not used by --tokenizer_type bytes"),
        (["--split-sentences", "--sentence-splitter", "nltk"],
         "--split-sentences: NLTK punkt unavailable for --lang english"),
    ],
)
def test_bad_input_names_the_flag_and_file_and_leaves_nothing(tmp_path, gpt2, corpus, args,
                                                              message):
    out = tmp_path / "out"
    out.mkdir()
    args = [a.format(dir=tmp_path, vocab=gpt2[0], merges=gpt2[1]) for a in args]
    result = run("--input", corpus, "--output-prefix", out / "c", *args)
    assert result.returncode != 0
    assert re.search(message, result.stderr), result.stderr[-1500:]
    assert os.listdir(out) == []


def test_keep_newlines_without_split_sentences_is_ignored_as_megatron_does(tmp_path, gpt2,
                                                                         corpus):
    written = {}
    for flags in ([], ["--keep-newlines"]):
        out = tmp_path / f"out{len(flags)}"
        out.mkdir()
        result = run("--input", corpus, "--output-prefix", out / "c", "--tokenizer-type",
                     "GPT2BPETokenizer", "--vocab-file", gpt2[0], "--merge-file", gpt2[1],
                     "--append-eod", "--noprogress", *flags)
        assert result.returncode == 0, result.stderr[-1500:]
        assert ("--keep_newlines has no effect" in result.stderr) == bool(flags)
        written[len(flags)] = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert written[0] == written[1]  # the same bytes


def test_split_sentences_without_any_splitter(tmp_path, corpus):
    out = tmp_path / "out"
    out.mkdir()
    result = run("--input", corpus, "--output-prefix", out / "c", "--split-sentences",
                 sentencex=False)
    assert result.returncode != 0
    assert "--split-sentences: no sentence splitter available" in result.stderr
    assert os.listdir(out) == []
