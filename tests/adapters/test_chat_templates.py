"""Chat templates: ids equal transformers' apply_chat_template, the trained roles equal
transformers' assistant mask over each template's ``{% generation %}`` twin, trained spans
decode to the assistant contents, and the check refuses a wrong mask and a prefix mask."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
transformers = pytest.importorskip("transformers")

from tokenizer_files import training_text  # noqa: E402  (tests/helpers)

from megadata_adapters.tokenizing.chat_roles import encode_conversations  # noqa: E402
from megadata_adapters.tokenizing.chat_templates import ChatTemplate  # noqa: E402
from megadata_core import DataError  # noqa: E402
from megadata_core.format.roles import Role  # noqa: E402
from megadata_core.preprocess.conversations import Conversation, check_roles  # noqa: E402

MARKERS = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>", "<start_of_turn>", "<end_of_turn>"]


def _gen(role_test: str, body: str, twin: bool) -> str:
    """``body`` (Jinja) inside ``{% generation %}`` for assistant messages when ``twin``."""
    if not twin:
        return body
    return (f"{{% if {role_test} %}}{{% generation %}}{body}{{% endgeneration %}}"
            f"{{% else %}}{body}{{% endif %}}")


def chatml(twin: bool = False) -> str:
    """ChatML with reasoning (<think>) and tool calls (tojson) between content and end."""
    assistant = "message.role == 'assistant'"
    return (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
        "{% if message.reasoning_content is defined %}"
        "{{ '<think>' + message.reasoning_content + '</think>\n' }}{% endif %}"
        + _gen(assistant, "{{ message['content'] }}", twin)
        + "{% if message.tool_calls is defined %}{% for call in message.tool_calls %}"
        "{{ '\n<tool_call>' + call.function | tojson + '</tool_call>' }}{% endfor %}"
        "{% endif %}"
        + _gen(assistant, "{{ '<|im_end|>' }}", twin)
        + "{{ '\n' }}{% endfor %}"
    )


def llama3(twin: bool = False) -> str:
    """Llama-3 header tags, contents trimmed, tool calls as name(arguments)."""
    assistant = "message.role == 'assistant'"
    return (
        "{{ bos_token }}{% for message in messages %}"
        "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
        + _gen(assistant, "{{ message['content'] | trim }}", twin)
        + "{% if message.tool_calls is defined %}{% for call in message.tool_calls %}"
        "{{ call.function.name }}({{ call.function.arguments | tojson }}){% endfor %}"
        "{% endif %}"
        + _gen(assistant, "<|eot_id|>", twin)
        + "{% endfor %}"
    )


# Gemma-like, its assistant turns (content, tool calls, end of turn) in {% generation %}.
GENERATION = (
    "{% for message in messages %}"
    "{% set role = 'model' if message.role == 'assistant' else message.role %}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{% if message.role == 'assistant' %}{% generation %}{{ message.content }}"
    "{% for call in message.tool_calls or [] %}[{{ call.function.name }}]{% endfor %}"
    "<end_of_turn>{% endgeneration %}"
    "{% else %}{{ message.content }}<end_of_turn>{% endif %}{{ '\n' }}{% endfor %}"
)

def qwen(twin: bool = False) -> str:
    """Qwen2.5's: the tools (``tojson``) in the system turn, an assistant's content only
    ``if message.content`` when it has tool calls, a default system prompt, tool responses
    joined into one user turn."""
    assistant = "message.role == 'assistant'"
    return (
        "{%- if tools %}{{- '<|im_start|>system\n' }}"
        "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
        "{%- else %}{{- 'You are Qwen.' }}{%- endif %}"
        "{{- '\n\n# Tools\n\nYou are provided with function signatures within <tools>"
        "</tools> XML tags:\n<tools>' }}"
        "{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}"
        "{{- '\n</tools><|im_end|>\n' }}"
        "{%- elif messages[0]['role'] == 'system' %}"
        "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
        "{%- else %}{{- '<|im_start|>system\nYou are Qwen.<|im_end|>\n' }}{%- endif %}\n"
        "{%- for message in messages %}\n"
        "    {%- if (message.role == 'user') or (message.role == 'system' and not loop.first)"
        " or (message.role == 'assistant' and not message.tool_calls) %}\n"
        "        {{- '<|im_start|>' + message.role + '\n' }}"
        + _gen(assistant, "{{- message.content }}", twin)
        + _gen(assistant, "{{- '<|im_end|>' }}", twin) + "{{- '\n' }}\n"
        "    {%- elif message.role == 'assistant' %}\n"
        "        {{- '<|im_start|>' + message.role }}\n"
        "        {%- if message.content %}{{- '\n' }}"
        + _gen(assistant, "{{- message.content }}", twin) + "{%- endif %}\n"
        "        {%- for tool_call in message.tool_calls %}\n"
        "            {%- if tool_call.function is defined %}"
        "{%- set tool_call = tool_call.function %}{%- endif %}\n"
        "            {{- '\n<tool_call>\n{\"name\": \"' }}{{- tool_call.name }}"
        "{{- '\", \"arguments\": ' }}{{- tool_call.arguments | tojson }}"
        "{{- '}\n</tool_call>' }}\n"
        "        {%- endfor %}\n"
        "        " + _gen(assistant, "{{- '<|im_end|>' }}", twin) + "{{- '\n' }}\n"
        "    {%- elif message.role == 'tool' %}\n"
        "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}"
        "{{- '<|im_start|>user' }}{%- endif %}\n"
        "        {{- '\n<tool_response>\n' }}{{- message.content }}"
        "{{- '\n</tool_response>' }}\n"
        "        {%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}"
        "{{- '<|im_end|>\n' }}{%- endif %}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
    )


TEMPLATES = {"chatml": (chatml(), chatml(True)), "llama3": (llama3(), llama3(True)),
             "generation": (GENERATION, GENERATION), "qwen": (qwen(), qwen(True))}
BOS = {"llama3": {"bos_token": "<|begin_of_text|>"}}


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE trained here, the templates' markers its special tokens and a
    ByteLevel post-processor that trims offsets (as GPT-2's and Llama-3's do)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=MARKERS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text() + ["user assistant system tool think"] * 50,
                            trainer)
    return tok


def _fast(tok, source: str, name: str):
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=source,
                                                **BOS.get(name, {}))


def _template(name: str) -> ChatTemplate:
    return ChatTemplate(TEMPLATES[name][0], name=name, variables=BOS.get(name))


TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
WORDS = st.sampled_from(["", " ", "hi", "Hello there", " lead", "trail \n", "\n\nx",
                         "東京", "😀 ok", "<|im_end|>", "a  b", "\t"])
CONTENT = st.one_of(WORDS, TEXT)
CALL = st.builds(lambda name, arg: {"type": "function", "function": {
    "name": name, "arguments": {"q": arg}}}, st.sampled_from(["search", "calc"]), CONTENT)


@st.composite
def conversations(draw):
    """Any roles in any order, empty turns, unicode, tool calls and reasoning."""
    messages = []
    for _ in range(draw(st.integers(1, 6))):
        role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
        message = {"role": role, "content": draw(CONTENT)}
        if role == "assistant" and draw(st.booleans()):
            message["tool_calls"] = draw(st.lists(CALL, min_size=1, max_size=2))
        if role == "assistant" and draw(st.booleans()):
            message["reasoning_content"] = draw(CONTENT)
        messages.append(message)
    return messages


def _assistant_mask(tok, name: str, messages, tools=None) -> tuple[list[int], list[int]]:
    """transformers' (ids, assistant mask) over the template's {% generation %} twin, with
    the tokenizer's offsets untrimmed (its ByteLevel post-processor trims a whitespace
    token's offsets to nothing, and transformers' mask then misses a span's leading
    whitespace token; the ids are the same without it)."""
    clone = type(tok).from_str(tok.to_str())
    clone.post_processor = None
    out = _fast(clone, TEMPLATES[name][1], name).apply_chat_template(
        messages, tools=tools, tokenize=True, return_dict=True,
        return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


def _straddles(tok, name: str, messages) -> bool:
    """Whether a token of the twin's render crosses a {% generation %} span's edge."""
    from transformers.utils.chat_template_utils import render_jinja_template

    fast = _fast(tok, TEMPLATES[name][1], name)
    rendered, spans = render_jinja_template(
        [messages], chat_template=TEMPLATES[name][1], return_assistant_tokens_mask=True,
        **fast.special_tokens_map)
    clone = type(tok).from_str(tok.to_str())
    clone.post_processor = None
    offsets = clone.encode(rendered[0], add_special_tokens=False).offsets
    edges = {edge for span in spans[0] for edge in span}
    return any(start < edge < stop for start, stop in offsets for edge in edges)


TRAINED = (Role.ASSISTANT, Role.END_OF_TURN)


def _prove(tok, name, messages, tools=None):
    """Ours against transformers: ids, the trained mask; (roles, transformers' ids) or
    None when refused (then a token truly straddles a trained span, or the data holds
    the end of turn). ``tools``: the tool definitions the template is given."""
    template = _template(name)
    fast = _fast(tok, template.source, name)
    reference = list(fast.apply_chat_template(messages, tools=tools, tokenize=True,
                                              return_dict=False))
    ids, roles, skipped = encode_conversations([Conversation(messages, tools)], template, tok,
                                               on_unprovable="skip")
    if skipped:
        return None, reference
    assert ids[0].dtype == np.int32 and roles[0].dtype == np.uint8
    assert ids[0].tolist() == reference
    twin_ids, mask = _assistant_mask(tok, name, messages, tools)
    assert twin_ids == reference  # the twin renders the same text
    trained = set(TRAINED) | ({Role.TOOL_CALL} if name == "generation" else set())
    ours = np.isin(roles[0], list(trained)).astype(int).tolist()
    assert ours == mask
    # the trained runs decode to the assistant contents and their ends of turn
    runs = tok.decode(ids[0][np.isin(roles[0], TRAINED)].tolist(), skip_special_tokens=False)
    eot = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "generation": "<end_of_turn>",
           "qwen": "<|im_end|>"}[name]
    contents = [m["content"].strip() if name == "llama3" else m["content"]
                for m in messages if m["role"] == "assistant"]
    assert runs == "".join(c + eot for c in contents)
    return roles[0], reference


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(messages=conversations())
@example(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}])
@example(messages=[{"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "calc", "arguments": {"q": "1+1"}}}]},
    {"role": "tool", "content": "2"}, {"role": "assistant", "content": " 2 "}])
def test_roles_equal_transformers(tokenizer, name, messages):
    roles, reference = _prove(tokenizer, name, messages)
    if roles is None:  # refused: only where no mask can be right
        with pytest.raises(DataError) as refusal:
            encode_conversations([messages], _template(name), tokenizer)
        reason = str(refusal.value)
        assert "straddles" in reason or "tool calls hold its end of turn" in reason, reason
        if "tool calls hold" in reason:
            assert any("<|im_end|>" in json.dumps(c, ensure_ascii=False)
                       for m in messages for c in m.get("tool_calls", []))


TOOL = st.builds(lambda name, text: {"type": "function", "function": {
    "name": name, "description": text,
    "parameters": {"type": "object", "properties": {"q": {"type": "string",
                                                          "description": text}}}}},
    st.sampled_from(["search", "calc"]), CONTENT)


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(messages=conversations(), tools=st.lists(TOOL, min_size=1, max_size=3))
@example(messages=[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "",
                    "tool_calls": [{"type": "function", "function": {
                        "name": "calc", "arguments": {"q": "2+2"}}}]},
                   {"role": "tool", "content": "4"}, {"role": "assistant", "content": "4."}],
         tools=[{"type": "function", "function": {"name": "calc", "description": "<|im_end|>",
                                                  "parameters": {}}}])
def test_tools_render_as_transformers(tokenizer, messages, tools):
    """A record's tools reach the template as apply_chat_template(tools=...) gives them:
    the same ids, the same mask, and the tools' text (in the system turn) never trained."""
    roles, reference = _prove(tokenizer, "qwen", messages, tools)
    without, _ = _prove(tokenizer, "qwen", messages)
    if roles is not None and without is not None:
        assert len(reference) > len(without)  # the tools were rendered
        assert np.isin(roles, list(TRAINED)).sum() == np.isin(without, list(TRAINED)).sum()


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_most_conversations_are_proven(tokenizer, name):
    """Plain conversations (no whitespace at content edges) are all proven."""
    words = ["Hello there", "東京 ok", "what is 2+2?", "Four.", "thanks", "😀 bye"]
    proven = 0
    for n in range(30):
        messages = [{"role": "system", "content": words[n % 6]}]
        for k in range(1 + n % 3):
            messages += [{"role": "user", "content": words[(n + k) % 6]},
                         {"role": "assistant", "content": words[(n + 2 * k + 1) % 6]}]
        roles, _ = _prove(tokenizer, name, messages)
        proven += roles is not None
    assert proven == 30


def _prefix_mask(tok, template: ChatTemplate, messages) -> np.ndarray:
    """The mask of prefix renders' token counts: what this module never does."""
    encode = type(tok).from_str(tok.to_str())
    lengths = [0] + [len(encode.encode(template.render(messages[:k + 1]),
                                       add_special_tokens=False).ids)
                     for k in range(len(messages))]
    roles = np.zeros(lengths[-1], np.uint8)
    for k, message in enumerate(messages):
        if message["role"] == "assistant":
            roles[lengths[k]:lengths[k + 1]] = Role.ASSISTANT
    return roles


@pytest.mark.parametrize("name", ["chatml", "llama3"])
def test_check_refuses_wrong_and_prefix_masks(tokenizer, name):
    from megadata_adapters.tokenizing.chat_roles import _spans  # the proof's own spans
    from megadata_core.preprocess.conversations import expected_pieces

    template = _template(name)
    eot = "<|im_end|>" if name == "chatml" else "<|eot_id|>"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello there"},
                {"role": "user", "content": "what is 2+2?"},
                {"role": "assistant", "content": "Four."}]
    ids, roles, _ = encode_conversations([messages], template, tokenizer)
    text = template.render(messages)
    pieces = expected_pieces(text, *_spans(template, messages, text, eot))

    def decode(part):
        return tokenizer.decode(part.tolist(), skip_special_tokens=False)

    assert check_roles(ids[0], roles[0], pieces, decode) is None
    trained = np.flatnonzero(roles[0] == Role.ASSISTANT)
    for wrong_at, wrong_role in [(trained[0], Role.TEMPLATE), (trained[0] - 1, Role.ASSISTANT),
                                 (trained[-1] + 1, Role.TEMPLATE)]:
        wrong = roles[0].copy()
        wrong[wrong_at] = wrong_role
        assert check_roles(ids[0], wrong, pieces, decode) is not None
    prefix = _prefix_mask(tokenizer, template, messages)
    assert prefix.size == ids[0].size
    merged = np.where(np.isin(roles[0], [Role.ASSISTANT, Role.END_OF_TURN]), 0, roles[0])
    assert check_roles(ids[0], np.maximum(merged, prefix), pieces, decode) is not None


def test_refusals_name_the_conversation(tokenizer):
    template = _template("chatml")
    good = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    straddling = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "  Yo"}]
    # the template changes content (upper): put back, it is not the real text
    upper = ChatTemplate("{% for m in messages %}<|im_start|>{{ m.content | upper }}<|im_end|>"
                         "{% endfor %}", name="upper")
    with pytest.raises(DataError, match=r"c\.jsonl, line 2: .*upper: .*changes them"):
        digits = [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}]
        encode_conversations([digits, good], upper, tokenizer, where=["c.jsonl, line 1",
                                                                    "c.jsonl, line 2"])
    # "user: " + "  Yo": the pre-token "  " (merged "ĠĠ") holds the template's space and
    # the content's first
    spaced = ChatTemplate("{% for m in messages %}{{ m.role }}: {{ m.content }}<|im_end|>"
                          "{% endfor %}", name="spaced")
    ids, roles, skipped = encode_conversations([good, straddling], spaced, tokenizer,
                                               on_unprovable="skip")
    assert len(ids) == 1 and skipped == 1
    with pytest.raises(DataError, match=r"line 9: .*token \d+ \('  '\) straddles"):
        encode_conversations([straddling], spaced, tokenizer, where=["x, line 9"])
    twice = ChatTemplate("{% for m in messages %}{{ m.content }}{{ m.content }}<|im_end|>"
                         "{% endfor %}", name="twice", end_of_turn="<|im_end|>")
    with pytest.raises(DataError, match="more than once"):
        encode_conversations([good], twice, tokenizer)
    refusing = ChatTemplate("{% for m in messages %}{% if m.role == 'system' %}"
                            "{{ raise_exception('no system') }}{% endif %}{{ m.content }}"
                            "<|im_end|>{% endfor %}", name="refusing")
    system = [{"role": "system", "content": "s"}, *good]
    with pytest.raises(DataError, match="conversation 0: .*no system"):
        encode_conversations([system], refusing, tokenizer)
    assert encode_conversations([system, good], refusing, tokenizer,
                                on_unprovable="skip")[2] == 1
    # an empty assistant message the template tests: its end of turn has no anchor
    testing = ChatTemplate("{% for m in messages %}<|im_start|>{% if m.content %}"
                           "{{ '\\n' + m.content }}{% endif %}{% for c in m.tool_calls or [] %}"
                           "{{ c.function.name }}{% endfor %}<|im_end|>{% endfor %}",
                           name="testing")
    with pytest.raises(DataError, match="assistant message 1 is empty and the template tests"):
        encode_conversations([[good[0], {"role": "assistant", "content": ""}]], testing,
                             tokenizer)
    # ... and with a tool call, its name anchors it (Qwen2.5's templates)
    called = [good[0], {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {}}}]}]
    ids, roles, _ = encode_conversations([called], testing, tokenizer)
    assert tokenizer.decode(ids[0][roles[0] == Role.END_OF_TURN].tolist(),
                            skip_special_tokens=False) == "<|im_end|>"
    calls = [{"role": "assistant", "content": "x", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {"q": "<|im_end|>"}}}]}]
    with pytest.raises(DataError, match="tool calls hold its end of turn"):
        encode_conversations([calls], template, tokenizer)
    with pytest.raises(DataError, match="on_unprovable"):
        encode_conversations([good], template, tokenizer, on_unprovable="train")
    with pytest.raises(DataError, match="where: 1 names for 2"):
        encode_conversations([good, good], template, tokenizer, where=["a"])


def test_end_of_turn_probe_and_option(tokenizer):
    bare = ChatTemplate("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
                        name="bare")
    good = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    with pytest.raises(DataError, match="bare: no added token .* name the end of turn"):
        encode_conversations([good], bare, tokenizer)
    named = ChatTemplate(bare.source, name="bare", end_of_turn="\n")
    ids, roles, _ = encode_conversations([good], named, tokenizer)
    assert tokenizer.decode(ids[0][roles[0] == Role.END_OF_TURN].tolist()) == "\n"
    with pytest.raises(DataError, match="end_of_turn must be a non-empty string"):
        ChatTemplate(bare.source, end_of_turn="")


def test_builtins_and_tokenizer_directory(tokenizer, tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": " Hello there "}]
    for name in ("chatml", "llama3"):
        template = ChatTemplate.builtin(name)
        fast = _fast(tokenizer, template.source, name)
        ids, roles, _ = encode_conversations([messages], template, tokenizer)
        assert ids[0].tolist() == list(fast.apply_chat_template(messages, return_dict=False))
        directory = tmp_path / name
        fast.save_pretrained(str(directory))
        loaded = ChatTemplate.from_tokenizer_dir(directory)
        assert loaded.source == template.source
        again, again_roles, _ = encode_conversations([messages], loaded, str(directory))
        reloaded = transformers.AutoTokenizer.from_pretrained(str(directory))
        assert again[0].tolist() == list(reloaded.apply_chat_template(messages,
                                                                      return_dict=False))
        assert again_roles[0].tolist() == roles[0].tolist()
    # the built-in ChatML leaves tool calls out: nothing of them to train
    called = [*messages, {"role": "assistant", "content": "ok", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {}}}]}]
    ids, roles, _ = encode_conversations([called], ChatTemplate.builtin("chatml"), tokenizer)
    assert not np.any(roles[0] == Role.TOOL_CALL)
    assert np.count_nonzero(roles[0] == Role.END_OF_TURN) == 2
    with pytest.raises(DataError, match="not one of chatml, llama3"):
        ChatTemplate.builtin("vicuna")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no chat template"):
        ChatTemplate.from_tokenizer_dir(tmp_path / "empty")
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": [{"name": "tool_use", "template": "x"}]}))
    with pytest.raises(DataError, match="no 'default'"):
        ChatTemplate.from_tokenizer_dir(tmp_path / "named")
    with pytest.raises(DataError, match="no such tokenizer directory"):
        ChatTemplate.from_tokenizer_dir(tmp_path / "missing")
    with pytest.raises(DataError, match="does not compile"):
        ChatTemplate("{% for %}")
