"""json_scan's line kinds on lines dense with backslashes and quotes: a line marked
native is one Python's json reads as an object whose wanted key holds a string, and a
line json.dumps writes (any escapes) is marked native."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from megadata_core.preprocess.json_scan import EMPTY, NATIVE, scan_block

PIECES = ["\\", '"', "\\\\", '\\"', '\\\\"', '\\\\\\"', "a", " ", "\\n", "\\u0041", "\\ud83d",
          "\\ude00", ",", ":", "{", "}", "[", "]", "1", '"text"', '": "', "\\/", "\\x"]

raw_lines = st.lists(st.sampled_from(PIECES), max_size=12).map(
    lambda pieces: ('{"text": "' + "".join(pieces) + '"}').encode())
dumped_lines = st.text(alphabet=st.sampled_from('\\"a /\n\tb{}:,'), max_size=20).map(
    lambda text: json.dumps({"text": text, "id": [1, {"k": text}]}).encode())


def _python_reads(line: bytes) -> bool:
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and isinstance(value.get("text"), str)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.one_of(raw_lines, dumped_lines), min_size=1, max_size=20))
def test_native_lines_are_what_python_reads(lines):
    data = b"\n".join(lines) + b"\n"
    scan = scan_block(data, ("text",))
    assert scan.lines == len(lines)
    for line, kind in zip(lines, scan.kinds.tolist()):
        if kind == NATIVE:
            assert _python_reads(line), line
        assert kind != EMPTY


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(dumped_lines, min_size=1, max_size=20))
def test_dumped_lines_are_native(lines):
    data = b"\n".join(lines)  # the last line without its newline
    scan = scan_block(data, ("text",))
    assert scan.kinds.tolist() == [NATIVE] * len(lines)
