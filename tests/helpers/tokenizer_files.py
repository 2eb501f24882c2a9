"""Tiny tokenizer files trained offline on stdlib text, in each format Megatron users have.

Imported by name by the preprocessing and tokenizing tests (this folder is on sys.path); runnable
as ``python tokenizer_files.py DIR`` to write them all into DIR.
"""

from __future__ import annotations

import base64
import json
import os
import sys

from megadata_adapters.tokenizing.byte_level_bpe import bytes_to_unicode

# Training text: stdlib docstrings plus unicode, accents, CJK and control characters.
EXTRA = [
    "Zürich, São Paulo, Ångström, naïve café, résumé.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم",
    "tabs\tand\nnewlines\r\nand\x0bvertical\x0cfeeds\x00nul\x1funit",
    "emoji 😀🎉 and math ∑∫√ and quotes “curly” ‘single’",
]


def training_text() -> list[str]:
    """Lines of plain text: docstrings of a few stdlib modules plus EXTRA."""
    import collections
    import json as json_module
    import os as os_module
    import re

    lines = []
    for module in (collections, json_module, os_module, re):
        for name in sorted(dir(module)):
            doc = getattr(getattr(module, name), "__doc__", None)
            if isinstance(doc, str):
                lines.extend(line.strip() for line in doc.splitlines() if line.strip())
    return lines + EXTRA * 20


def write_gpt2_files(directory: str, vocab_size: int = 600) -> tuple[str, str]:
    """vocab.json + merges.txt of a byte-level BPE with <|endoftext|>, as GPT-2 ships them."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(), trainer)
    tokenizer.model.save(directory)
    return os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt")


def write_tiktoken_ranks(directory: str, vocab_size: int = 600) -> str:
    """A tiktoken ranks file of the byte-level BPE of ``write_gpt2_files``: bytes ranked
    0..255 by value, merge k's result ranked 256 + k."""
    sub = os.path.join(directory, "gpt2-for-ranks")
    os.makedirs(sub, exist_ok=True)
    _, merges_file = write_gpt2_files(sub, vocab_size)
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    with open(merges_file, encoding="utf-8") as stream:
        merges = [line.split(" ") for line in stream.read().split("\n")[1:] if line]
    tokens = [bytes([b]) for b in range(256)]
    tokens += [bytes(to_byte[c] for c in left + right) for left, right in merges]
    path = os.path.join(directory, "trained.tiktoken")
    with open(path, "wb") as stream:
        stream.writelines(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(tokens))
    return path


def write_bert_vocab(directory: str, vocab_size: int = 500, lowercase: bool = True) -> str:
    """vocab.txt of a WordPiece model with BERT's special tokens."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(lowercase=lowercase)
    tokenizer.train_from_iterator(
        training_text(), vocab_size=vocab_size, show_progress=False,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    )
    name = "vocab-uncased" if lowercase else "vocab-cased"
    os.makedirs(os.path.join(directory, name), exist_ok=True)
    return tokenizer.save_model(os.path.join(directory, name))[0]


def write_sentencepiece_model(directory: str, vocab_size: int = 800, model_type="bpe",
                              normalization: str = "nmt_nfkc") -> str:
    """A SentencePiece .model (byte fallback, eos </s>) trained on the text; ``identity``
    normalization (and no whitespace removal) makes a BPE model gigatoken's proof covers."""
    import io

    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text()), model_writer=model, vocab_size=vocab_size,
        model_type=model_type, byte_fallback=True, character_coverage=1.0,
        minloglevel=2, num_threads=1, normalization_rule_name=normalization,
        remove_extra_whitespaces=normalization != "identity",
    )
    name = model_type if normalization == "nmt_nfkc" else f"{model_type}-{normalization}"
    path = os.path.join(directory, f"sp-{name}.model")
    with open(path, "wb") as stream:
        stream.write(model.getvalue())
    return path


def write_hf_directory(directory: str, texts: list[str] | None = None, name: str = "hf") -> str:
    """A HuggingFace tokenizer directory ``name``: tokenizer.json (trained on ``texts``,
    default ``training_text()``) + tokenizer_config.json (eos </s>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500, special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(training_text() if texts is None else texts, trainer)
    path = os.path.join(directory, name)
    os.makedirs(path, exist_ok=True)
    tokenizer.save(os.path.join(path, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
              "eos_token": "</s>", "pad_token": "<pad>"}
    with open(os.path.join(path, "tokenizer_config.json"), "w") as stream:
        json.dump(config, stream)
    return path


def write_tiktoken_json(directory: str, merges=(b"th", b"he", b"the", b" t", b"in", b"er"),
                        name: str = "tiktoken.json") -> str:
    """Megatron's TikTokenizer vocabulary: a JSON list of {rank, token_bytes, token_str}."""
    tokens = [bytes([b]) for b in range(256)] + list(merges)
    entries = [
        {"rank": i, "token_bytes": base64.b64encode(t).decode(),
         "token_str": t.decode("utf-8", "replace")}
        for i, t in enumerate(tokens)
    ]
    path = os.path.join(directory, name)
    with open(path, "w") as stream:
        json.dump(entries, stream)
    return path


def write_trained_tiktoken_json(directory: str, vocab_size: int = 2000) -> str:
    """Megatron's TikTokenizer vocabulary of ``write_tiktoken_ranks``' trained ranks."""
    with open(write_tiktoken_ranks(directory, vocab_size), "rb") as stream:
        tokens = [base64.b64decode(line.split()[0]) for line in stream if line.strip()]
    return write_tiktoken_json(directory, tokens[256:], name="trained-tiktoken.json")


def write_all(directory: str) -> dict[str, str]:
    vocab, merges = write_gpt2_files(directory)
    return {
        "gpt2_vocab": vocab, "gpt2_merges": merges,
        "bert_uncased": write_bert_vocab(directory, lowercase=True),
        "bert_cased": write_bert_vocab(directory, lowercase=False),
        "sentencepiece": write_sentencepiece_model(directory),
        "hf_dir": write_hf_directory(directory),
        "tiktoken_json": write_tiktoken_json(directory),
    }


def write_small_gpt2_files(directory: str) -> tuple[str, str]:
    """256 byte tokens, 5 merges, <|endoftext|> (id 261): ids checked against Megatron-LM."""
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ã", "¼"), ("i", "n")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    vocab_path = os.path.join(directory, "small-vocab.json")
    merges_path = os.path.join(directory, "small-merges.txt")
    with open(vocab_path, "w", encoding="utf-8") as stream:
        json.dump(vocab, stream)
    with open(merges_path, "w", encoding="utf-8") as stream:
        stream.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return vocab_path, merges_path


def write_small_bert_vocab(directory: str) -> str:
    """18 WordPiece tokens (ids checked against Megatron-LM)."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "zurich", "Zürich",
              "##s", "东", "京", ".", ",", "run", "##ning", "a", "##b"]
    path = os.path.join(directory, "small-vocab.txt")
    with open(path, "w", encoding="utf-8") as stream:
        stream.write("\n".join(tokens) + "\n")
    return path


if __name__ == "__main__":
    print(json.dumps(write_all(sys.argv[1]), indent=1))
