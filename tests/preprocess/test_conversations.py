"""Conversations from JSON lines (both forms, each rejected kind) and the numpy part of
their roles: per-token roles from spans and offsets, straddling tokens, the check."""

from __future__ import annotations

import gzip
import json
import pickle

import numpy as np
import pytest

from megadata_core import DataError
from megadata_core.format.roles import Role
from megadata_core.preprocess.conversations import (
    check_roles,
    expected_pieces,
    normalize_conversation,
    parse_conversation,
    read_conversations,
    role_runs,
    token_roles,
)
from megadata_core.preprocess.encoding import BadLineError


def _line(record) -> bytes:
    return json.dumps(record).encode() + b"\n"


def test_openai_form_normalized():
    messages = parse_conversation(_line({"messages": [
        {"role": "system", "content": "s", "extra": 1},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "reasoning": "why",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "f", "arguments": {"x": 1}}},
                        {"name": "g", "arguments": "{}"}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"},
    ]}), "a.jsonl", 1)
    assert messages == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "reasoning_content": "why", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}, "id": "c1"},
            {"type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"},
    ]


def test_a_records_tools_are_the_conversations():
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    listed = parse_conversation(_line({"messages": [USER], "tools": [tool]}), "a.jsonl", 1)
    given_as_text = normalize_conversation(
        {"conversations": [{"from": "human", "value": "h"}], "tools": json.dumps([tool])},
        "b.jsonl, line 2")
    assert listed.tools == given_as_text.tools == [tool]
    assert parse_conversation(_line({"messages": [USER]}), "a.jsonl", 1).tools is None
    assert pickle.loads(pickle.dumps(listed)).tools == [tool]


def test_sharegpt_form_normalized():
    messages = normalize_conversation({"conversations": [
        {"from": "system", "value": "s"}, {"from": "human", "value": "h"},
        {"from": "function_call", "value": json.dumps({"name": "f", "arguments": {"a": 2}})},
        {"from": "observation", "value": "o"}, {"from": "gpt", "value": "g"},
    ]}, "b.jsonl, line 2")
    assert messages == [
        {"role": "system", "content": "s"}, {"role": "user", "content": "h"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"a": 2}}}]},
        {"role": "tool", "content": "o"}, {"role": "assistant", "content": "g"},
    ]


def test_read_conversations_plain_and_gzip(tmp_path):
    lines = [b"\xef\xbb\xbf" + _line({"messages": [{"role": "user", "content": "a"}]}),
             b"\n", _line({"conversations": [{"from": "gpt", "value": "b"}]})]
    plain = tmp_path / "c.jsonl"
    plain.write_bytes(b"".join(lines))
    packed = tmp_path / "c.jsonl.gz"
    packed.write_bytes(gzip.compress(b"".join(lines)))
    for path in (plain, packed):
        assert list(read_conversations(str(path))) == [
            (1, [{"role": "user", "content": "a"}]), (3, [{"role": "assistant", "content": "b"}])]


def test_read_conversations_names_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(_line({"messages": [{"role": "user", "content": "a"}]})
                     + _line({"messages": [{"role": "robot", "content": "a"}]}))
    with pytest.raises(DataError, match=r"d\.jsonl, line 2: messages\[0\]\.role is 'robot'"):
        list(read_conversations(str(path)))
    with pytest.raises(DataError, match="input file not found"):
        list(read_conversations(str(tmp_path / "missing.jsonl")))


@pytest.mark.parametrize("line, kind", [
    (b"\xff\xfe\n", "invalid_utf8"), (b"{not json\n", "invalid_json"), (b"[1, 2]\n", "not_object"),
])
def test_bad_lines(line, kind):
    with pytest.raises(BadLineError, match=r"x\.jsonl, line 7") as error:
        parse_conversation(line, "x.jsonl", 7)
    assert error.value.kind == kind


USER = {"role": "user", "content": "u"}


@pytest.mark.parametrize("record, message", [
    ({}, "found neither"),
    ({"messages": [USER], "conversations": []}, "found 'messages' and 'conversations'"),
    ({"messages": {"role": "user"}}, "messages must be an array, found an object"),
    ({"messages": []}, "messages is empty"),
    ({"messages": ["hi"]}, r"messages\[0\] must be an object, found a string"),
    ({"messages": [{"content": "x"}]}, r"messages\[0\]\.role is null, not one of"),
    ({"messages": [{"role": "bot", "content": "x"}]}, r"messages\[0\]\.role is 'bot'"),
    ({"messages": [{"role": "user"}]}, r"messages\[0\]\.content must be a string, found null"),
    ({"messages": [{"role": "user", "content": 3}]}, r"content must be a string, found a number"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
     "content parts are not read"),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, "not valid Unicode"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [{"name": "f"}]}]},
     "only an assistant message has tool calls"),
    ({"messages": [{"role": "assistant", "tool_calls": []}]}, "must be a non-empty array"),
    ({"messages": [{"role": "assistant", "tool_calls": ["f"]}]},
     r"tool_calls\[0\] must be an object"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": "f"}]}]},
     r"tool_calls\[0\]\.function must be an object"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]},
     r"tool_calls\[0\]\.function\.name must be a string"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"name": ""}]}]},
     r"tool_calls\[0\]\.name is empty"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"name": "f", "arguments": 3}]}]},
     r"arguments must be an object or a string, found a number"),
    ({"messages": [{"role": "user", "content": "x", "reasoning_content": "r"}]},
     "only an assistant message has reasoning"),
    ({"messages": [{"role": "assistant", "content": "x", "reasoning_content": "r",
                    "thinking": "t"}]}, "reasoning_content and thinking differ"),
    ({"messages": [{"role": "assistant", "content": "x", "reasoning": 5}]},
     r"messages\[0\]\.reasoning must be a string"),
    ({"messages": [{"role": "tool", "content": "x", "name": 1}]}, r"\.name must be a string"),
    ({"conversations": [{"from": "alien", "value": "x"}]}, r"conversations\[0\]\.from is 'alien'"),
    ({"conversations": [{"from": "gpt"}]}, r"conversations\[0\]\.value must be a string"),
    ({"conversations": [{"from": "function_call", "value": "f("}]}, "text that is no JSON"),
    ({"conversations": [{"from": "function_call", "value": "{}"}]},
     r"conversations\[0\]\.value\.name must be a string"),
    ({"messages": [USER], "tools": {"name": "f"}},
     "tools must be an array of tool definitions, found an object"),
    ({"messages": [USER], "tools": "[{"}, "tools is a string that is no JSON"),
    ({"messages": [USER], "tools": "5"}, "tools must be an array of tool definitions, found a"),
    ({"messages": [USER], "tools": ["search"]}, r"tools\[0\] must be an object, found a string"),
    ({"messages": [USER], "tools": [{"description": "\ud800"}]},
     "tools holds text that is not valid Unicode"),
])
def test_rejected_conversations(record, message):
    with pytest.raises(DataError, match=r"f\.jsonl, line 4: .*" + message):
        parse_conversation(_line(record), "f.jsonl", 4)


def test_token_roles_and_straddling():
    # text: "<h>hello</h><a>yes!<e>" spans: user "hello" [3, 8), assistant "yes!" [15, 19),
    # end of turn [19, 22); an empty span at 12 is ignored
    bounds = np.array([[3, 8], [12, 12], [15, 19], [19, 22]])
    roles = np.array([Role.USER, Role.SYSTEM, Role.ASSISTANT, Role.END_OF_TURN], np.uint8)
    offsets = np.array([[0, 3], [3, 5], [5, 8], [8, 12], [12, 15], [15, 17], [17, 19],
                        [19, 22]])
    got, straddling = token_roles(offsets, bounds, roles)
    assert got.dtype == np.uint8
    assert got.tolist() == [0, 2, 2, 0, 0, 3, 3, 4]
    assert straddling.size == 0
    # a token over the edge of the user span, one over the assistant's into its end of turn
    offsets = np.array([[0, 4], [4, 8], [8, 15], [15, 20], [20, 22]])
    got, straddling = token_roles(offsets, bounds, roles)
    assert straddling.tolist() == [0, 3]
    with pytest.raises(DataError, match="sorted and disjoint"):
        token_roles(offsets, np.array([[0, 5], [3, 8]]), roles[:2])
    with pytest.raises(DataError, match="2 spans but 1 roles"):
        token_roles(offsets, np.array([[0, 5], [6, 8]]), roles[:1])


def test_role_runs():
    starts, stops, roles = role_runs(np.array([0, 0, 3, 3, 4, 0, 2, 2, 0], np.uint8))
    assert starts.tolist() == [2, 4, 6] and stops.tolist() == [4, 5, 8]
    assert roles.tolist() == [3, 4, 2]
    starts, stops, roles = role_runs(np.zeros(0, np.uint8))
    assert starts.size == stops.size == roles.size == 0


def _chars(ids) -> str:
    return "".join(chr(int(i)) for i in ids)


def test_check_roles_proves_and_catches():
    text = "<u>hi</u><a>yo</a>"
    ids = np.array([ord(c) for c in text])
    bounds = np.array([[3, 5], [12, 14], [14, 18]])
    span_roles = np.array([Role.USER, Role.ASSISTANT, Role.END_OF_TURN], np.uint8)
    pieces = expected_pieces(text, bounds, span_roles)
    assert pieces == [(2, "hi"), (3, "yo"), (4, "</a>")]
    roles, _ = token_roles(np.stack([np.arange(18), np.arange(1, 19)], 1), bounds, span_roles)
    assert check_roles(ids, roles, pieces, _chars) is None
    wrong = roles.copy()
    wrong[11] = Role.ASSISTANT  # one template token trained too
    assert "decodes to '>yo'" in check_roles(ids, wrong, pieces, _chars)
    wrong = roles.copy()
    wrong[13] = Role.TEMPLATE  # one assistant token not trained
    assert check_roles(ids, wrong, pieces, _chars) is not None
    wrong = roles.copy()
    wrong[14:] = Role.ASSISTANT  # the end of turn under the content's role
    assert "3 spans" in check_roles(ids, wrong, pieces, _chars)
    wrong = roles.copy()
    wrong[3:5] = Role.SYSTEM
    assert "is SYSTEM, its span is USER" in check_roles(ids, wrong, pieces, _chars)
    # touching spans of one role are one piece, as their tokens are one run
    assert expected_pieces("abcd", np.array([[0, 2], [2, 4]]),
                           np.array([3, 3], np.uint8)) == [(3, "abcd")]
