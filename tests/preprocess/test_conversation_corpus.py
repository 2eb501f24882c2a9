"""The preprocessing driver with a conversation encoder: the tokens corpus and, beside it,
the roles corpus (uint8, the same lengths and documents), through the one driver: one
process, a pool, the resumable plan; refused conversations raise or are counted; nothing
under a finished name when a run fails."""

from __future__ import annotations

import filecmp
import json
import os

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.format.roles import Role, has_roles, roles_prefix
from megadata_core.preprocess import preprocess_jsonl
from megadata_core.preprocess.conversations import tokenize_conversations
from megadata_core.preprocess.encoding import BadLineError


class TaggedBytes:
    """Renders ``<role>content`` per message as UTF-8 bytes; content bytes take the
    message's role, the tags TEMPLATE (a stand-in for a chat template, so that the
    driver's plumbing is tested without one)."""

    eod_id = 256
    vocab_size = 257
    ROLES = {"system": Role.SYSTEM, "user": Role.USER, "assistant": Role.ASSISTANT,
             "tool": Role.TOOL}

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode(), np.uint8).astype(np.int64)

    def encode_conversations(self, conversations, where):
        results = []
        for messages, place in zip(conversations, where):
            if not isinstance(messages, list) or not all(
                    isinstance(m, dict) and m.get("role") in self.ROLES for m in messages):
                results.append(BadLineError(f"{place}: not a list of messages",
                                            "not_conversation"))
                continue
            ids, roles = [], []
            for message in messages:
                head, body = self.encode(f"<{message['role']}>"), self.encode(message["content"])
                ids += [head, body]
                roles += [np.zeros(head.size, np.uint8),
                          np.full(body.size, self.ROLES[message["role"]], np.uint8)]
            results.append((np.concatenate(ids), np.concatenate(roles)))
        return results

    def __repr__(self) -> str:
        return "TaggedBytes()"


def _conversation(i: int) -> dict:
    return {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": f"question {i} é"},
                         {"role": "assistant", "content": "answer " * (i % 5)}]}


def _write(path, count: int = 60, bad_at: tuple[int, ...] = ()) -> str:
    lines = [json.dumps({"messages": "not messages"}) if i in bad_at else
             json.dumps(_conversation(i)) for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _expected(i: int) -> tuple[bytes, list[int]]:
    ids, roles = TaggedBytes().encode_conversations([_conversation(i)["messages"]], ["x"])[0]
    return bytes(ids.astype(np.uint8)), roles.tolist()


@pytest.mark.parametrize("options", [{}, {"workers": 2, "task_size": 700}],
                         ids=["one process", "pool over the task plan"])
def test_tokens_and_roles_are_written_side_by_side(tmp_path, options):
    source = _write(tmp_path / "in.jsonl")
    out = str(tmp_path / "chat")
    summary = preprocess_jsonl([source], out, TaggedBytes, json_keys=["messages"],
                               append_eod=True, **options)
    prefix = out + "_messages_document"
    assert has_roles(prefix)
    tokens, roles = mdc.IndexedDataset(prefix), mdc.IndexedDataset(roles_prefix(prefix))
    assert roles.dtype == np.uint8 and len(tokens) == len(roles) == 60
    assert np.array_equal(tokens.sequence_lengths, roles.sequence_lengths)
    assert np.array_equal(tokens.document_indices, roles.document_indices)
    for i in (0, 7, 59):
        text, codes = _expected(i)
        assert bytes(tokens[i][:-1].astype(np.uint8)) == text
        assert tokens[i][-1] == 256 and roles[i].tolist() == codes + [Role.TEMPLATE]
    assert summary.tokens == int(tokens.sequence_lengths.sum())
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["in.jsonl", *(os.path.basename(p) + ext for p in (prefix, roles_prefix(prefix))
                       for ext in (".bin", ".idx"))])


def test_a_pool_writes_the_bytes_of_one_process(tmp_path):
    source = _write(tmp_path / "in.jsonl", count=200)
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    preprocess_jsonl([source], one, TaggedBytes, json_keys=["messages"])
    preprocess_jsonl([source], two, TaggedBytes, json_keys=["messages"], workers=2,
                     task_size=1500)
    for suffix in ("_messages_document", "_messages_document_roles"):
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(one + suffix + ext, two + suffix + ext, shallow=False)


def test_a_refused_conversation_names_its_line_and_leaves_no_corpus(tmp_path):
    source = _write(tmp_path / "in.jsonl", bad_at=(41,))
    with pytest.raises(mdc.DataError, match=r"in.jsonl, line 42: not a list of messages"):
        preprocess_jsonl([source], str(tmp_path / "chat"), TaggedBytes, json_keys=["messages"])
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_skipped_conversations_are_counted_and_the_rest_kept(tmp_path):
    source = _write(tmp_path / "in.jsonl", bad_at=(3, 41))
    summary = preprocess_jsonl([source], str(tmp_path / "chat"), TaggedBytes,
                               json_keys=["messages"], skip_bad_lines=True)
    assert summary.bad_line_kinds == {"not_conversation": 2} and summary.documents == 58
    roles = mdc.IndexedDataset(str(tmp_path / "chat_messages_document_roles"))
    assert len(roles) == 58 and roles[3].tolist() == _expected(4)[1]


def test_a_resumed_plan_finishes_the_same_corpus(tmp_path):
    source = _write(tmp_path / "in.jsonl", count=120)
    whole, resumed = str(tmp_path / "whole"), str(tmp_path / "resumed")
    preprocess_jsonl([source], whole, TaggedBytes, json_keys=["messages"], task_size=900)
    preprocess_jsonl([source], resumed, TaggedBytes, json_keys=["messages"], task_size=900,
                     keep_shards=True)
    work = resumed + ".work"
    manifests = sorted(name for name in os.listdir(work) if name.endswith(".json")
                       and name.startswith("task"))
    os.unlink(os.path.join(work, manifests[1]))  # as if killed before that task ended
    for name in os.listdir(tmp_path):
        if name.startswith("resumed_"):
            os.unlink(tmp_path / name)
    preprocess_jsonl([source], resumed, TaggedBytes, json_keys=["messages"], task_size=900)
    for suffix in ("_messages_document", "_messages_document_roles"):
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(whole + suffix + ext, resumed + suffix + ext, shallow=False)


@pytest.mark.parametrize("options, message", [
    ({"json_keys": ["messages", "other"]}, "a conversation corpus takes one key"),
    ({"json_keys": ["messages"], "keep_empty": True}, "keep_empty"),
])
def test_what_a_conversation_run_refuses(tmp_path, options, message):
    source = _write(tmp_path / "in.jsonl")
    with pytest.raises(mdc.DataError, match=message):
        preprocess_jsonl([source], str(tmp_path / "chat"), TaggedBytes, **options)
    assert not any(name.startswith("chat") for name in os.listdir(tmp_path))


def test_an_encoder_that_returns_mismatched_roles_is_refused():
    class Broken(TaggedBytes):
        def encode_conversations(self, conversations, where):
            return [(ids, roles[:-1]) for ids, roles in super().encode_conversations(
                conversations, where)]

    with pytest.raises(mdc.DataError, match="ids .* and .* roles for in, line 1"):
        tokenize_conversations([json.dumps(_conversation(1)).encode()], Broken(),
                               ["messages"], path="in")
