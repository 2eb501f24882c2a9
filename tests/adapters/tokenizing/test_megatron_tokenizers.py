"""Megatron-LM's tokenizer types (megadata_adapters.tokenizing.megatron_tokenizers via
load_tokenizer).

Ids, EOD and vocabulary sizes must be Megatron's. SentencePiece, TikTokenizer and
NullTokenizer are checked against megatron-core's own tokenizer builder (the one its
preprocess_data.py uses); GPT2BPETokenizer and the BERT types live outside the wheel,
so they are checked against literal ids taken from Megatron-LM 0.16.1's script and
shown equal to the ``tokenizers`` library's stock byte-level BPE and BERT WordPiece.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle

import numpy as np
import pytest
import tokenizer_files as files

from megadata_adapters.tokenizing.text_tokenizers import TOKENIZER_TYPES, load_tokenizer
from megadata_core import DataError

# unicode, accents, control characters, CJK, special-token text, whitespace runs
CORPUS = [
    "Hello, world. This is a test.",
    "Zürich, São Paulo, Ångström, naïve café, résumé. ÀÉÎÕÜ àéîõü ß ﬁ",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "",
    "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم",
    "control\x00chars\x01\x07\x1b[31m and\u200bzero width\ufeffbom \ufffd replacement",
    "tabs\tand\nnewlines\r\nand\x0bvertical\x0cfeeds\x1funit\x85nel\u2028ls",
    "   leading and trailing spaces   ",
    "many     spaces\n\n\nand blank lines",
    "emoji 😀🎉👩‍👩‍👧 and math ∑∫√ and quotes “curly” ‘single’ — dash",
    "numbers 1234567 3.14159 1,000,000 ١٢٣ ５６７",
    "contractions: don't can't I'm we'll they've she'd it's DON'T",
    "combining e\u0301 a\u0308 n\u0303; Hangul \u1100\u1161; Thai ภาษาไทย; Hindi हिन्दी",
    "code: def f(x):\n    return x**2  # comment\n",
    " ",
]
SPECIAL_TEXT = "special <|endoftext|> </s> <s> [SEP] [CLS] <unk> <EOD> tokens in text"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tokenizers")
    paths = files.write_all(str(directory))
    paths["small_gpt2"] = files.write_small_gpt2_files(str(directory))
    paths["small_bert"] = files.write_small_bert_vocab(str(directory))
    paths["dir"] = str(directory)
    return paths


def ids_of(tokenizer, texts):
    return [tokenizer.encode(text).tolist() for text in texts]


# -- literal ids from Megatron-LM 0.16.1 (megatron/training/tokenizer, as its script runs offline)


def test_gpt2_bpe_matches_megatron_literals(tokenizer_dir):
    vocab, merges = tokenizer_dir["small_gpt2"]
    tokenizer = load_tokenizer("GPT2BPETokenizer", vocab_file=vocab, merge_file=merges)
    assert (tokenizer.eod_id, tokenizer.vocab_size) == (261, 262)
    texts = ["the cat in the hat", "Zürich 东京\x00\x07 café", "tab\tnew\nline"]
    assert ids_of(tokenizer, texts) == [
        [116, 257, 32, 99, 97, 116, 32, 260, 258, 32, 104, 97, 116],
        [90, 259, 114, 105, 99, 104, 32, 228, 184, 156, 228, 186, 172, 0, 7, 32, 99, 97, 102,
         195, 169],
        [116, 97, 98, 9, 110, 101, 119, 10, 108, 260, 101],
    ]


@pytest.mark.parametrize(
    "kind, first",
    [("BertWordPieceLowerCase", [5, 6, 9, 13, 7, 12]), ("BertWordPieceCase", [1, 6, 9, 13, 8, 12])],
)
def test_bert_matches_megatron_literals(tokenizer_dir, kind, first):
    tokenizer = load_tokenizer(kind, vocab_file=tokenizer_dir["small_bert"])
    # [BOS] and [EOS] are appended to the 18-token vocabulary; [EOS] is the EOD
    assert (tokenizer.eod_id, tokenizer.vocab_size) == (19, 20)
    text = "The cats, Zürich. 东京 running ab abab " + "a" * 201  # a word over 200 chars is [UNK]
    assert tokenizer.encode(text).tolist() == first + [10, 11, 14, 15, 16, 17, 1, 1]
    assert tokenizer.encode("ZURICH\x00\x07the\u00a0cat").tolist() == [1, 6]


def test_gpt2_merges_read_as_megatron_reads_them(tmp_path, tokenizer_dir):
    """Megatron skips the merges file's first and last lines: a file without its final
    newline loses its last merge, and one without the #version header its first."""
    vocab, merges = tokenizer_dir["small_gpt2"]
    text = open(merges, encoding="utf-8").read()
    cut = tmp_path / "merges-no-final-newline.txt"
    cut.write_text(text.rstrip("\n"), encoding="utf-8")
    full = load_tokenizer("GPT2BPETokenizer", vocab_file=vocab, merge_file=merges)
    short = load_tokenizer("GPT2BPETokenizer", vocab_file=vocab, merge_file=str(cut))
    assert full.encode("in").tolist() == [260]
    assert short.encode("in").tolist() == [105, 110]  # "i n" was the last line


# -- equivalence with the tokenizers library's stock implementations, on CORPUS


def test_gpt2_bpe_equals_byte_level_bpe(tokenizer_dir):
    from tokenizers import ByteLevelBPETokenizer

    merges = tokenizer_dir["gpt2_merges"]
    with open(merges, encoding="utf-8") as stream:  # so that both read every merge
        assert stream.read().endswith("\n")
    ours = load_tokenizer("GPT2BPETokenizer", vocab_file=tokenizer_dir["gpt2_vocab"],
                          merge_file=merges)
    stock = ByteLevelBPETokenizer(tokenizer_dir["gpt2_vocab"], merges)
    expected = [stock.encode(text).ids for text in CORPUS + [SPECIAL_TEXT]]
    assert ids_of(ours, CORPUS + [SPECIAL_TEXT]) == expected
    assert sum(map(len, expected)) < sum(len(t.encode()) for t in CORPUS)  # merges were used
    assert ours.eod_id == stock.token_to_id("<|endoftext|>")
    assert ours.eod_id not in sum(expected, [])  # the EOD text is not the EOD token


@pytest.mark.parametrize("lower", [True, False])
def test_bert_equals_bert_wordpiece(tokenizer_dir, lower):
    from tokenizers import BertWordPieceTokenizer

    vocab = tokenizer_dir["bert_uncased" if lower else "bert_cased"]
    kind = "BertWordPieceLowerCase" if lower else "BertWordPieceCase"
    ours = load_tokenizer(kind, vocab_file=vocab)
    stock = BertWordPieceTokenizer(vocab, lowercase=lower)
    expected = [stock.encode(text, add_special_tokens=False).ids for text in CORPUS]
    assert ids_of(ours, CORPUS) == expected
    unk = stock.token_to_id("[UNK]")
    assert sum(i != unk for ids in expected for i in ids) > 100  # real word pieces
    # Megatron's BERT splits special-token text like any other (no added tokens)
    assert ours.encode("[SEP]").tolist() == ours.encode("[ SEP ]").tolist()
    with open(vocab, encoding="utf-8") as stream:
        lines = len(stream.read().splitlines())
    assert (ours.eod_id, ours.vocab_size) == (lines + 1, lines + 2)


# -- megatron-core's own builder (what preprocess_data.py uses by default)


def megatron_core_tokenizer(kind, **flags):
    build = pytest.importorskip("megatron.core.tokenizers.text.utils.build_tokenizer")
    args = argparse.Namespace(
        tokenizer_type=kind, tokenizer_model=None, vocab_file=None, merge_file=None,
        vocab_size=None, tokenizer_special_tokens=None, tokenizer_metadata=None,
        tokenizer_sentencepiece_legacy=False, tokenizer_hf_use_fast=False,
        trust_remote_code=False, tokenizer_hf_include_special_tokens=False,
        tiktoken_pattern=None, tiktoken_num_special_tokens=1000,
    )
    for name, value in flags.items():
        setattr(args, name, value)
    return build.build_tokenizer(args)


SP_TYPES = ["SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"]


@pytest.mark.parametrize("kind", SP_TYPES)
def test_sentencepiece_equals_megatron_core(tokenizer_dir, kind):
    pytest.importorskip("sentencepiece")
    model = tokenizer_dir["sentencepiece"]
    reference = megatron_core_tokenizer(kind, tokenizer_model=model)
    ours = load_tokenizer(kind, tokenizer_model=model)
    texts = CORPUS + [SPECIAL_TEXT]
    assert ids_of(ours, texts) == [list(reference.tokenize(text)) for text in texts]
    assert (ours.eod_id, ours.vocab_size) == (reference.eod, reference.vocab_size)


@pytest.mark.parametrize("pattern", [None, "v1", "v2"])
def test_tiktokenizer_equals_megatron_core(tokenizer_dir, pattern):
    path = tokenizer_dir["tiktoken_json"]
    flags = dict(tokenizer_model=path, vocab_size=1262, tiktoken_pattern=pattern,
                 tiktoken_num_special_tokens=1000)
    reference = megatron_core_tokenizer("TikTokenizer", **flags)
    ours = load_tokenizer("TikTokenizer", **flags)
    texts = CORPUS + [SPECIAL_TEXT]
    assert ids_of(ours, texts) == [list(reference.tokenize(text)) for text in texts]
    assert (ours.eod_id, ours.vocab_size) == (reference.eod, reference.vocab_size) == (2, 1262)
    assert 2 in ours.encode(SPECIAL_TEXT).tolist()  # "</s>" in the text is the special token


def test_null_tokenizer_equals_megatron_core():
    reference = megatron_core_tokenizer("NullTokenizer", vocab_size=5000)
    ours = load_tokenizer("NullTokenizer", vocab_size=5000)
    texts = ["1 2 3", "42", "4999 0 17", "+7 08"]
    assert ids_of(ours, texts) == [list(reference.tokenize(text)) for text in texts]
    assert (ours.eod_id, ours.vocab_size) == (reference.eod, reference.vocab_size) == (5000, 5001)
    with pytest.raises(DataError, match="not integers separated by single spaces"):
        ours.encode("1  2")


# -- HuggingFaceTokenizer: a directory or its tokenizer.json


def test_huggingface_directory_eod_from_config(tmp_path, tokenizer_dir):
    from tokenizers import Tokenizer

    directory = tokenizer_dir["hf_dir"]
    stock = Tokenizer.from_file(f"{directory}/tokenizer.json")
    for path in (directory, f"{directory}/tokenizer.json"):
        ours = load_tokenizer("HuggingFaceTokenizer", tokenizer_model=path)
        assert ours.eod_id == stock.token_to_id("</s>")  # tokenizer_config.json's eos_token
        assert ours.vocab_size == stock.get_vocab_size(with_added_tokens=True)
        texts = CORPUS + [SPECIAL_TEXT]
        assert ids_of(ours, texts) == [stock.encode(t, add_special_tokens=False).ids for t in texts]
    # without eos_token, transformers (hence Megatron) takes sep_token
    other = tmp_path / "hf-sep"
    other.mkdir()
    (other / "tokenizer.json").write_text(open(f"{directory}/tokenizer.json").read())
    (other / "tokenizer_config.json").write_text(json.dumps({"sep_token": {"content": "<pad>"}}))
    assert load_tokenizer("HuggingFaceTokenizer", str(other)).eod_id == stock.token_to_id("<pad>")


# -- every type: batch encoding, pickling


def all_tokenizers(paths):
    vocab, merges = paths["gpt2_vocab"], paths["gpt2_merges"]
    return {
        "GPT2BPETokenizer": dict(vocab_file=vocab, merge_file=merges),
        "BertWordPieceLowerCase": dict(vocab_file=paths["bert_uncased"]),
        "BertWordPieceCase": dict(vocab_file=paths["bert_cased"]),
        "SentencePieceTokenizer": dict(tokenizer_model=paths["sentencepiece"]),
        "GPTSentencePieceTokenizer": dict(tokenizer_model=paths["sentencepiece"]),
        "Llama2Tokenizer": dict(tokenizer_model=paths["sentencepiece"]),
        "HuggingFaceTokenizer": dict(tokenizer_model=paths["hf_dir"]),
        "TikTokenizer": dict(tokenizer_model=paths["tiktoken_json"], vocab_size=1262),
    }


def test_every_megatron_type_is_covered(tokenizer_dir):
    assert set(all_tokenizers(tokenizer_dir)) | {"NullTokenizer"} == set(TOKENIZER_TYPES)


@pytest.mark.parametrize("kind", sorted(set(TOKENIZER_TYPES) - {"NullTokenizer"}))
def test_encode_batch_equals_encode(tokenizer_dir, kind):
    pytest.importorskip("sentencepiece")
    options = all_tokenizers(tokenizer_dir)[kind]
    factory = pickle.loads(pickle.dumps(functools.partial(load_tokenizer, kind, **options)))
    tokenizer = pickle.loads(pickle.dumps(factory()))  # workers may receive either
    ids, lengths = tokenizer.encode_batch(CORPUS)
    assert ids.dtype == lengths.dtype == np.int64 and lengths.shape == (len(CORPUS),)
    pieces = np.split(ids, np.cumsum(lengths)[:-1])
    assert [piece.tolist() for piece in pieces] == ids_of(tokenizer, CORPUS)
    assert lengths[CORPUS.index("")] == 0


# -- bad input: DataErrors naming the flag and the file


def test_unknown_type_lists_the_known_ones():
    with pytest.raises(DataError, match="--tokenizer-type: 'GPT2Tokenizer' is not one of.*"
                                        "GPT2BPETokenizer.*NullTokenizer"):
        load_tokenizer("GPT2Tokenizer")


def test_missing_files(tmp_path, tokenizer_dir):
    missing = str(tmp_path / "missing.json")
    cases = [
        ("GPT2BPETokenizer", dict(vocab_file=missing, merge_file=tokenizer_dir["gpt2_merges"]),
         "--vocab-file .*missing.json: GPT-2 vocab.json file not found"),
        ("GPT2BPETokenizer", dict(vocab_file=tokenizer_dir["gpt2_vocab"]),
         "--merge-file: a GPT-2 merges.txt file is required"),
        ("BertWordPieceCase", dict(), "--vocab-file: a BERT vocab.txt file is required"),
        ("Llama2Tokenizer", dict(tokenizer_model=missing), "--tokenizer-model .*missing.json"),
        ("HuggingFaceTokenizer", dict(tokenizer_model=str(tmp_path)), "no tokenizer.json"),
        ("TikTokenizer", dict(tokenizer_model="https://x/y.json"), "downloading is not supported"),
        ("NullTokenizer", dict(), "--vocab-size"),
    ]
    for kind, options, message in cases:
        with pytest.raises(DataError, match=message):
            load_tokenizer(kind, **options)


def test_malformed_and_wrong_kind_files(tmp_path, tokenizer_dir):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\xff\xfe not text \x00")
    bad_merges = tmp_path / "bad-merges.txt"
    bad_merges.write_text("#version: 0.2\na b c\n")
    unknown_merge = tmp_path / "unknown-merges.txt"
    unknown_merge.write_text("#version: 0.2\nq@ z@\n")
    vocab, merges = tokenizer_dir["gpt2_vocab"], tokenizer_dir["gpt2_merges"]
    bert, model = tokenizer_dir["bert_cased"], tokenizer_dir["sentencepiece"]
    cases = [
        ("GPT2BPETokenizer", dict(vocab_file=bert, merge_file=merges),
         "--vocab-file .*vocab.txt: not a GPT-2 vocab.json"),
        ("GPT2BPETokenizer", dict(vocab_file=str(garbage), merge_file=merges),
         "--vocab-file .*garbage.bin: not a vocab.json .invalid UTF-8"),
        ("GPT2BPETokenizer", dict(vocab_file=vocab, merge_file=str(bad_merges)),
         "--merge-file .*bad-merges.txt: line 2 is 'a b c', not a pair"),
        ("GPT2BPETokenizer", dict(vocab_file=vocab, merge_file=str(unknown_merge)),
         "--merge-file .*unknown-merges.txt: does not fit --vocab-file"),
        ("BertWordPieceLowerCase", dict(vocab_file=vocab),
         "--vocab-file .*vocab.json: looks like a JSON vocabulary"),
        ("BertWordPieceLowerCase", dict(vocab_file=merges), "no '\\[UNK\\]' token"),
        ("SentencePieceTokenizer", dict(tokenizer_model=vocab),
         "--tokenizer-model .*vocab.json: not a SentencePiece model"),
        ("SentencePieceTokenizer", dict(tokenizer_model=tokenizer_dir["dir"]),
         "is a directory, expected a SentencePiece .model file"),
        ("HuggingFaceTokenizer", dict(tokenizer_model=model),
         "--tokenizer-model .*sp-bpe.model: not a readable tokenizer.json"),
        ("TikTokenizer", dict(tokenizer_model=model), "TikTokenizer takes Megatron's JSON"),
        ("TikTokenizer", dict(tokenizer_model=vocab, vocab_size=1262),
         "--tokenizer-model .*vocab.json: expected a JSON list"),
        ("TikTokenizer", dict(tokenizer_model=tokenizer_dir["tiktoken_json"]),
         "262 ranks, fewer than --vocab-size minus --tiktoken-num-special-tokens = 130072"),
        ("TikTokenizer", dict(tokenizer_model=tokenizer_dir["tiktoken_json"],
                              tiktoken_pattern="v3"), "--tiktoken-pattern: 'v3'"),
        ("BertWordPieceCase", dict(vocab_file=bert, merge_file=merges),
         "BertWordPieceCase takes --vocab-file vocab.txt; --merge-file does not apply"),
    ]
    for kind, options, message in cases:
        with pytest.raises(DataError, match=message):
            load_tokenizer(kind, **options)


def _threads_in_worker(_):
    import os

    from megadata_adapters.tokenizing.megatron_tokenizers import batch_threads

    return batch_threads(), os.environ.get("TOKENIZERS_PARALLELISM")


def test_batch_encoders_use_one_thread_inside_pool_workers(monkeypatch):
    import multiprocessing

    from megadata_adapters.tokenizing.megatron_tokenizers import batch_threads

    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    assert batch_threads() == (os.cpu_count() or 1)  # the main process: every core
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.map(_threads_in_worker, [0]) == [(1, "false")]
