"""The preprocessing driver's conversation encoder: a tokenizer and a chat template, each
JSON line's conversation to its ids and proven roles (the core's ``ConversationEncoder``).

    encoder = ChatEncoder(load_tokenizer("huggingface", "tok/"), ChatTemplate.builtin("chatml"))
    preprocess_jsonl(["chat.jsonl"], "out/chat", lambda: encoder, json_keys=["messages"])

writes ``out/chat_messages_document.bin/.idx`` (the tokens) and
``out/chat_messages_document_roles.bin/.idx`` (a ``Role`` per token). ``--chat_template``
of ``megadata-preprocess`` builds one (:func:`load_chat_encoder`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess.conversations import normalize_conversation
from megadata_core.preprocess.encoding import BadLineError

from .chat_roles import encode_each, end_of_turn_of, fast_path, load_tokenizer_object
from .chat_templates import BUILTIN_TEMPLATES, ChatTemplate


class ChatEncoder:
    """A ``ConversationEncoder``: ``tokenizer`` (one of ``load_tokenizer``'s Hugging Face
    tokenizers, or anything with ``eod_id``, ``vocab_size``, ``encode`` and a ``path`` to
    its ``tokenizer.json``) and ``template``. Malformed conversations are refused by kind
    ``bad_conversation``, those whose roles cannot be proven by kind ``unprovable``.

    Where the tokenizer's byte-level BPE encoder is proven (``chat_templates.fast_path``)
    the ids come from it and the offsets from the tokens' byte lengths, else from
    ``tokenizers``; ``encoder`` names which (and why not the fast one), ``fast`` is the
    fast path or None (its ``texts`` counts the conversations it encoded)."""

    def __init__(self, tokenizer, template: ChatTemplate) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.eod_id = int(tokenizer.eod_id)
        self.vocab_size = int(tokenizer.vocab_size)
        self._rust = load_tokenizer_object(tokenizer)  # loaded once, not per block
        end_of_turn_of(template, self._rust)  # a template with none fails here, before work
        self.fast, why = fast_path(tokenizer, self._rust)
        self.encoder = (self.fast.name if self.fast is not None else
                        f"tokenizers offsets (no fast path: {why})")

    def encode(self, text: str):
        return self.tokenizer.encode(text)

    def encode_conversations(
        self, conversations: Sequence[object], where: Sequence[str],
        tools: Sequence[object] | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray] | BadLineError]:
        """Per conversation (the messages a line holds, OpenAI's or ShareGPT's form; its
        record's ``tools``, given to the template): its int32 ids and uint8 roles, or the
        BadLineError refusing it."""
        results: list = [None] * len(conversations)
        normalized, at = [], []
        offered = tools if tools is not None else [None] * len(conversations)
        for i, (value, place, given) in enumerate(zip(conversations, where, offered)):
            try:
                record = {_form(value): value, "tools": given}
                normalized.append(normalize_conversation(record, place))
                at.append(i)
            except DataError as error:
                results[i] = BadLineError(str(error), "bad_conversation")
        for i, result in zip(at, encode_each(normalized, self.template, self._rust,
                                                      fast=self.fast)):
            results[i] = result if not isinstance(result, str) else BadLineError(
                f"{where[i]}: the conversation's roles cannot be proven with "
                f"{self.template.name}: {result}", "unprovable")
        return results

    def __repr__(self) -> str:
        digest = hashlib.sha256(self.template.source.encode()).hexdigest()[:16]
        return (f"ChatEncoder({self.tokenizer!r}, {self.template!r}, template sha256 "
                f"{digest}, end_of_turn {self.template.end_of_turn!r})")


def _form(value: object) -> str:
    """The key of the form a conversation's messages are in: ShareGPT's (``from`` /
    ``value``) or OpenAI's (``role`` / ``content``)."""
    first = value[0] if isinstance(value, list) and value else None
    return "conversations" if isinstance(first, dict) and "from" in first else "messages"


def chat_template(spec: str, end_of_turn: str | None = None) -> ChatTemplate:
    """The template ``spec`` names: a built-in (``chatml``, ``llama3``), a ``.jinja``
    file, or a tokenizer directory (its ``chat_template.jinja`` or
    ``tokenizer_config.json``'s ``chat_template``)."""
    if spec in BUILTIN_TEMPLATES:
        return ChatTemplate.builtin(spec, end_of_turn=end_of_turn)
    if os.path.isfile(spec):
        if os.path.basename(spec) == "tokenizer_config.json":
            return ChatTemplate.from_tokenizer_dir(os.path.dirname(os.path.abspath(spec)),
                                                   end_of_turn=end_of_turn)
        with open(spec, encoding="utf-8") as stream:
            return ChatTemplate(stream.read(), name=spec, end_of_turn=end_of_turn)
    if os.path.isdir(spec):
        return ChatTemplate.from_tokenizer_dir(spec, end_of_turn=end_of_turn)
    raise DataError(f"chat_template: {spec!r} is no built-in template "
                    f"({', '.join(sorted(BUILTIN_TEMPLATES))}), .jinja file or tokenizer "
                    "directory")


def load_chat_encoder(tokenizer_factory: Callable[[], object], spec: str,
                      end_of_turn: str | None = None) -> ChatEncoder:
    """A :class:`ChatEncoder` of the tokenizer ``tokenizer_factory`` makes and the
    template ``spec`` names (picklable as a ``functools.partial``)."""
    return ChatEncoder(tokenizer_factory(), chat_template(spec, end_of_turn))
