"""The chat encoder's fast path: where the tokenizer's byte-level BPE encoder is proven,
ids from it and offsets from the tokens' byte lengths give the same ids and roles (or the
same refusal) as ``tokenizers``' offsets, on any conversation of the templates' property
tests (unicode, added tokens inside contents, empty contents); it is taken there and not
for a tokenizer without that proof."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
pytest.importorskip("transformers")
pytest.importorskip("tiktoken")

from test_chat_templates import (  # noqa: E402  (the templates' property tests)
    MARKERS,
    TEMPLATES,
    TEXT,
    _template,
    conversations,
)
from test_chat_templates import tokenizer as tokenizer  # noqa: E402, F401  (the fixture)

from megadata_adapters.tokenizing.chat_encoder import ChatEncoder  # noqa: E402
from megadata_adapters.tokenizing.chat_roles import (  # noqa: E402
    ByteOffsets,
    encode_each,
    fast_path,
    load_tokenizer_object,
)
from megadata_adapters.tokenizing.text_tokenizers import HuggingFaceTokenizer  # noqa: E402
from megadata_core.format.roles import Role  # noqa: E402


@pytest.fixture(scope="module")
def text_path(tokenizer, tmp_path_factory):
    """The fixture's tokenizer saved and loaded as the driver loads it (its text-path
    encoder proven), with the fast path of its file."""
    path = tmp_path_factory.mktemp("fast") / "tokenizer.json"
    path.write_text(tokenizer.to_str(), encoding="utf-8")
    loaded = HuggingFaceTokenizer(str(path), eod_token="<|im_end|>")
    rust = load_tokenizer_object(loaded)
    fast, why = fast_path(loaded, rust)
    assert fast is not None, why
    return loaded, rust, fast


def _same(template, conversations_, rust, fast) -> None:
    """The fast path's results equal tokenizers' path's: ids and roles, or both refused;
    and the fast path encoded every conversation rendered."""
    before = fast.texts
    theirs = encode_each(conversations_, template, rust)
    ours = encode_each(conversations_, template, rust, fast=fast)
    rendered = 0
    for mine, reference in zip(ours, theirs):
        if isinstance(reference, str):
            assert isinstance(mine, str), (mine, reference)
            rendered += "template fails" not in reference
            continue
        rendered += 1
        assert not isinstance(mine, str), mine
        assert mine[0].dtype == np.int32 and mine[1].dtype == np.uint8
        assert mine[0].tolist() == reference[0].tolist()
        assert mine[1].tolist() == reference[1].tolist()
    assert fast.texts - before <= rendered  # (a refused render or span is never encoded)
    assert fast.texts > before or not rendered or all(isinstance(r, str) for r in theirs)


@st.composite
def marked_conversations(draw):
    """The templates' conversations, some contents holding added tokens (alone, beside each
    other, inside words and unicode)."""
    messages = draw(conversations())
    for message in messages:
        if draw(st.booleans()):
            marks = draw(st.lists(st.sampled_from(MARKERS), min_size=1, max_size=3))
            glue = draw(st.sampled_from(["", " ", "x", "é", "😀", "\n"]))
            message["content"] = draw(TEXT) + glue.join(marks) + draw(TEXT)
    return messages


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(messages=st.one_of(conversations(), marked_conversations()))
@example(messages=[{"role": "user", "content": ""}, {"role": "assistant", "content": ""}])
@example(messages=[{"role": "user", "content": "é😀東京"},
                   {"role": "assistant", "content": "<|im_end|><|im_start|>😀"}])
@example(messages=[{"role": "system", "content": " "}, {"role": "user", "content": "\n\nx"},
                   {"role": "assistant", "content": "a<|eot_id|>b", "tool_calls": [
                       {"type": "function", "function": {"name": "calc",
                                                         "arguments": {"q": "東京 <|im_start|>"}}}],
                    "reasoning_content": "😀 ok"}])
def test_fast_path_equals_tokenizers_offsets(text_path, name, messages):
    _, rust, fast = text_path
    _same(_template(name), [messages], rust, fast)


def test_fast_path_batches_and_cut_characters(text_path):
    """Many conversations in one call (the driver's blocks); characters of 2, 3 and 4 bytes
    cut by tokens inside contents and at their edges."""
    _, rust, fast = text_path
    words = ["é", "東京", "😀", "👩\u200d👩\u200d👧", "ok é", " 😀 ", "\U0010fffd", "a\u0301"]
    batch = []
    for n in range(40):
        batch.append([{"role": "user", "content": words[n % 8] * (1 + n % 3)},
                      {"role": "assistant", "content": words[(n * 3) % 8] + words[n % 5]}])
    for name in sorted(TEMPLATES):
        _same(_template(name), batch, rust, fast)


def test_chat_encoder_takes_the_fast_path_where_proven(tokenizer, text_path, tmp_path):
    loaded, rust, _ = text_path
    template = _template("chatml")
    chat = ChatEncoder(loaded, template)
    assert chat.fast is not None and chat.encoder.startswith("byte offsets over ")
    assert loaded.encoder in chat.encoder  # the text path's encoder it runs on
    rows = [[{"role": "user", "content": f"What is {i}? é"},
             {"role": "assistant", "content": f"It is {i} <|im_start|> 😀"}] for i in range(9)]
    found = chat.encode_conversations(rows, [f"line {i}" for i in range(9)])
    assert chat.fast.texts == 9
    expected = encode_each(rows, template, rust)
    for (ids, roles), (their_ids, their_roles) in zip(found, expected):
        assert ids.tolist() == their_ids.tolist() and roles.tolist() == their_roles.tolist()
        assert Role.ASSISTANT in roles.tolist()

    # a tokenizer without the proof (a normalizer: the text path's encoder is tokenizers'):
    # the tokenizers path, the same ids and roles
    from tokenizers import normalizers

    clone = type(tokenizer).from_str(tokenizer.to_str())
    clone.normalizer = normalizers.NFC()
    path = tmp_path / "tokenizer.json"
    path.write_text(clone.to_str(), encoding="utf-8")
    unproven = HuggingFaceTokenizer(str(path), eod_token="<|im_end|>")
    plain = ChatEncoder(unproven, template)
    assert plain.fast is None
    assert plain.encoder.startswith("tokenizers offsets (no fast path: ")
    assert "normalizer" in plain.encoder
    again = plain.encode_conversations(rows, [f"line {i}" for i in range(9)])
    for (ids, roles), (their_ids, their_roles) in zip(again, expected):
        assert ids.tolist() == their_ids.tolist() and roles.tolist() == their_roles.tolist()
    # a bare tokenizers.Tokenizer proves nothing either
    assert fast_path(tokenizer, tokenizer)[0] is None


def test_wrong_byte_lengths_fall_back_to_tokenizers(text_path):
    """A text whose tokens' bytes are not its own is left to tokenizers (and counted out)."""
    loaded, rust, fast = text_path
    wrong = ByteOffsets(loaded.encode_batch, fast.byte_lengths + 1, fast.added, "wrong")
    texts = ["<|im_start|>user\nhi é<|im_end|>\n", ""]
    found = wrong.encode(texts)
    assert found[0] is None and wrong.texts == 1  # the empty text has no token to be wrong
    right = fast.encode(texts)
    expected = rust.encode(texts[0], add_special_tokens=False)
    assert right[0][0].tolist() == expected.ids
    assert right[0][1][-1, 1] == len(texts[0].encode("utf-8"))
    assert right[1][0].size == 0
    rows = [[{"role": "user", "content": "hi é"}, {"role": "assistant", "content": "yo"}]]
    template = _template("chatml")
    ours = encode_each(rows, template, rust, fast=wrong)
    theirs = encode_each(rows, template, rust)
    assert ours[0][0].tolist() == theirs[0][0].tolist()
    assert ours[0][1].tolist() == theirs[0][1].tolist()
