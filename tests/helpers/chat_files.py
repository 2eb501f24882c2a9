"""A chat model's tokenizer made here (a byte-level BPE trained on the machine, saved as
transformers saves one, the built-in chatml template as its chat_template) and generated
conversations, for the tests that preprocess conversations."""

from __future__ import annotations

import functools
import json
import os

from tokenizer_files import training_text

MARKERS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]


def save_chat_tokenizer(directory: str) -> str:
    """Train and save the tokenizer into ``directory``; returns it."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from megadata_adapters.tokenizing.chat_templates import BUILTIN_TEMPLATES

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=MARKERS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text() + ["user assistant system"] * 20, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, chat_template=BUILTIN_TEMPLATES["chatml"],
        eos_token="<|endoftext|>")
    fast.save_pretrained(directory)
    return directory


def chat_factory(directory: str):
    """A picklable factory of the ChatEncoder of the tokenizer in ``directory`` and its own
    chat template."""
    from megadata_adapters.tokenizing.chat_encoder import load_chat_encoder
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

    return functools.partial(load_chat_encoder, functools.partial(
        load_tokenizer, "huggingface", os.path.join(directory, "tokenizer.json")), directory)


def conversations(count: int, sharegpt: bool = False) -> list[dict]:
    """``count`` JSON records: OpenAI's messages form, or ShareGPT's."""
    rows = []
    for i in range(count):
        messages = [{"role": "user", "content": f"What is {i} plus {i}? é"},
                    {"role": "assistant", "content": f" It is {2 * i}."}]
        if i % 3 == 0:
            messages.insert(0, {"role": "system", "content": "Answer in numbers."})
        if i % 4 == 1:
            messages += [{"role": "user", "content": "And times two?"},
                         {"role": "assistant", "content": f"{4 * i}\n"}]
        rows.append({"messages": messages} if not sharegpt else
                    {"conversations": [{"from": {"user": "human", "assistant": "gpt"}.get(
                        m["role"], m["role"]), "value": m["content"]} for m in messages]})
    return rows


def write_rows(path, rows) -> str:
    with open(path, "w", encoding="utf-8") as stream:
        stream.writelines(json.dumps(row) + "\n" for row in rows)
    return str(path)
