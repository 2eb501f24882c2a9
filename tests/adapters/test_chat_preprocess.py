"""Conversations preprocessed into a corpus with the model's chat template, through the
library and ``megadata-preprocess --chat_template``: the tokens equal transformers'
``apply_chat_template``, the trained roles equal its assistant mask over the template's
``{% generation %}`` twin, with one process, a pool and Ray's engine."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
transformers = pytest.importorskip("transformers")

from chat_files import (  # noqa: E402  (tests/helpers)
    chat_factory,
    conversations,
    save_chat_tokenizer,
    write_rows,
)

import megadata_core as mdc  # noqa: E402
from megadata_adapters.tokenizing.chat_encoder import ChatEncoder, chat_template  # noqa: E402
from megadata_adapters.tokenizing.chat_templates import BUILTIN_TEMPLATES  # noqa: E402
from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer  # noqa: E402
from megadata_core.format.roles import Role, roles_prefix  # noqa: E402
from megadata_core.preprocess import preprocess_jsonl  # noqa: E402

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
TWIN = (  # chatml with {% generation %} around each assistant content and its end of turn
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{message['content'] + "
    "'<|im_end|>'}}{% endgeneration %}{{'\n'}}{% else %}{{message['content'] + "
    "'<|im_end|>' + '\n'}}{% endif %}{% endfor %}"
)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return save_chat_tokenizer(str(tmp_path_factory.mktemp("tok")))


def _messages(row: dict) -> list[dict]:
    if "messages" in row:
        return row["messages"]
    names = {"human": "user", "gpt": "assistant"}
    return [{"role": names.get(m["from"], m["from"]), "content": m["value"]}
            for m in row["conversations"]]


def _check_against_transformers(tokenizer_dir, prefix: str, rows, template: str | None = None,
                                twin_template: str = TWIN) -> None:
    """Each row's tokens and trained roles against apply_chat_template (with the row's
    tools) over the tokenizer's template, or ``template``, and its twin."""
    fast = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    if template is not None:
        fast.chat_template = template
    twin = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    twin.chat_template = twin_template
    tokens, roles = mdc.IndexedDataset(prefix), mdc.IndexedDataset(roles_prefix(prefix))
    assert len(tokens) == len(roles) == len(rows)
    for i, row in enumerate(rows):
        messages = _messages(row)
        tools = row.get("tools")
        tools = json.loads(tools) if isinstance(tools, str) else tools
        expected = list(fast.apply_chat_template(messages, tools=tools, return_dict=False))
        assert tokens[i][:-1].tolist() == expected and tokens[i][-1] == fast.eos_token_id
        out = twin.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                       return_assistant_tokens_mask=True)
        assert out["input_ids"] == expected
        trained = np.isin(roles[i][:-1], [Role.ASSISTANT, Role.END_OF_TURN]).astype(int)
        assert trained.tolist() == out["assistant_masks"], i
        assert roles[i][-1] == Role.TEMPLATE  # the EOD


@pytest.mark.parametrize("options", [{}, {"workers": 2, "task_size": 2500}],
                         ids=["one process", "pool"])
def test_the_corpus_equals_transformers(tmp_path, tokenizer_dir, options):
    rows = conversations(40)
    source = write_rows(tmp_path / "chat.jsonl", rows)
    summary = preprocess_jsonl([source], str(tmp_path / "out"), chat_factory(tokenizer_dir),
                               json_keys=["messages"], append_eod=True, **options)
    assert summary.documents == 40
    _check_against_transformers(tokenizer_dir, str(tmp_path / "out_messages_document"), rows)


def test_sharegptconversations(tmp_path, tokenizer_dir):
    rows = conversations(12, sharegpt=True)
    source = write_rows(tmp_path / "chat.jsonl", rows)
    preprocess_jsonl([source], str(tmp_path / "out"), chat_factory(tokenizer_dir),
                     json_keys=["conversations"], append_eod=True)
    _check_against_transformers(tokenizer_dir, str(tmp_path / "out_conversations_document"),
                                rows)


def test_the_command_line(tmp_path, tokenizer_dir):
    rows = conversations(30)
    source = write_rows(tmp_path / "chat.jsonl", rows + [{"messages": [{"role": "user"}]}])
    base = [sys.executable, os.path.join(REPO, "tools", "preprocess_data.py"),
            f"--input={source}", "--tokenizer-type=huggingface",
            f"--tokenizer-file={tokenizer_dir}/tokenizer.json",
            f"--chat-template={tokenizer_dir}",
            "--append-eod", "--workers=2"]
    env = {**os.environ, "PYTHONPATH": REPO}
    refused = subprocess.run([*base, f"--output-prefix={tmp_path}/refused"],
                             capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode != 0
    assert "chat.jsonl, line 31: messages[0].content must be a string" in refused.stderr
    assert not any(name.startswith("refused") for name in os.listdir(tmp_path))
    done = subprocess.run([*base, f"--output-prefix={tmp_path}/out", "--skip_bad_lines"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    _check_against_transformers(tokenizer_dir, str(tmp_path / "out_messages_document"),
                                rows)
    library = preprocess_jsonl([write_rows(tmp_path / "good.jsonl", rows)], str(tmp_path / "lib"),
                               chat_factory(tokenizer_dir), json_keys=["messages"],
                               append_eod=True)
    assert library.documents == 30
    for suffix in ("_messages_document", "_messages_document_roles"):
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(f"{tmp_path}/out{suffix}{ext}", f"{tmp_path}/lib{suffix}{ext}",
                               shallow=False)


TOOLS = ("{% if tools %}<|im_start|>system\nTools:{% for tool in tools %}\n"
         "{{ tool | tojson }}{% endfor %}<|im_end|>\n{% endif %}")


def test_a_records_tools_reach_the_template(tmp_path, tokenizer_dir):
    """``tools`` of a record (an array, or LLaMA-Factory's JSON string of one) is given to
    the template as apply_chat_template(tools=...) gives it; its text is never trained."""
    tool = {"type": "function", "function": {
        "name": "search", "description": "Looks up 東京 <|im_end|>",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    rows = conversations(12)
    for i, row in enumerate(rows):
        if i % 3 == 1:
            row["tools"] = [tool]
        elif i % 3 == 2:
            row["tools"] = json.dumps([tool, tool])
    bad = {**conversations(1)[0], "tools": {"name": "search"}}
    source = write_rows(tmp_path / "chat.jsonl", rows + [bad])
    tokenizer = load_tokenizer("huggingface", os.path.join(tokenizer_dir, "tokenizer.json"))
    encoder = ChatEncoder(tokenizer, chat_template(str(_jinja(
        tmp_path, TOOLS + BUILTIN_TEMPLATES["chatml"]))))
    options = dict(json_keys=["messages"], append_eod=True)
    with pytest.raises(mdc.DataError, match=r"chat.jsonl, line 13: tools must be an array of "
                                            r"tool definitions, found an object"):
        preprocess_jsonl([source], str(tmp_path / "refused"), lambda: encoder, **options)
    summary = preprocess_jsonl([source], str(tmp_path / "out"), lambda: encoder,
                               skip_bad_lines=True, **options)
    assert summary.bad_line_kinds == {"bad_conversation": 1} and summary.documents == 12
    _check_against_transformers(tokenizer_dir, str(tmp_path / "out_messages_document"), rows,
                                template=TOOLS + BUILTIN_TEMPLATES["chatml"],
                                twin_template=TOOLS + TWIN)
    plain = preprocess_jsonl([write_rows(tmp_path / "plain.jsonl", conversations(12))],
                             str(tmp_path / "plain"), lambda: encoder, **options)
    assert plain.documents == 12
    with_tools = mdc.IndexedDataset(str(tmp_path / "out_messages_document"))
    without = mdc.IndexedDataset(str(tmp_path / "plain_messages_document"))
    assert len(with_tools[1]) > len(without[1]) and len(with_tools[0]) == len(without[0])


def test_unprovable_conversations_are_refused_or_counted(tmp_path, tokenizer_dir):
    tokenizer = load_tokenizer("huggingface", os.path.join(tokenizer_dir, "tokenizer.json"))
    trims = chat_template(str(_jinja(tmp_path, BUILTIN_TEMPLATES["chatml"].replace(
        "message['content']", "message['content'] | upper"))))
    encoder = ChatEncoder(tokenizer, trims)
    rows = conversations(6)
    source = write_rows(tmp_path / "chat.jsonl", rows)
    with pytest.raises(mdc.DataError, match=r"chat.jsonl, line 1: the conversation's roles "
                                            r"cannot be proven"):
        preprocess_jsonl([source], str(tmp_path / "out"), lambda: encoder,
                         json_keys=["messages"])
    summary = preprocess_jsonl([source], str(tmp_path / "out"), lambda: encoder,
                               json_keys=["messages"], skip_bad_lines=True)
    assert summary.bad_line_kinds == {"unprovable": 6} and summary.documents == 0


def _jinja(tmp_path, source: str):
    path = tmp_path / "template.jinja"
    path.write_text(source)
    return path


def test_a_template_spec_that_names_nothing_is_refused(tmp_path):
    with pytest.raises(mdc.DataError, match="chat_template: 'vicuna' is no built-in"):
        chat_template("vicuna")
    assert chat_template("llama3").name == "llama3"
    assert chat_template(str(_jinja(tmp_path, "{{ messages }}"))).source == "{{ messages }}"


def test_a_template_without_an_end_of_turn_fails_before_any_work(tmp_path, tokenizer_dir):
    tokenizer = load_tokenizer("huggingface", os.path.join(tokenizer_dir, "tokenizer.json"))
    bare = chat_template(str(_jinja(tmp_path, "{% for m in messages %}{{ m['content'] }}"
                                              "{% endfor %}")))
    with pytest.raises(mdc.DataError, match="template.jinja: no added token of the tokenizer "
                                            "follows an assistant's content"):
        ChatEncoder(tokenizer, bare)
    named = chat_template(str(tmp_path / "template.jinja"), end_of_turn="<|endoftext|>")
    assert ChatEncoder(tokenizer, named).template.end_of_turn == "<|endoftext|>"


def test_a_parquet_messages_column_gives_the_json_lines_corpus(tmp_path, tokenizer_dir):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from megadata_adapters.engines.parquet_records import ParquetReader
    from megadata_core.preprocess import preprocess_tasks

    rows = conversations(30)
    tool = json.dumps([{"type": "function", "function": {"name": "search", "parameters": {}}}])
    for i, row in enumerate(rows):  # LLaMA-Factory's tools column: a JSON string or null
        row["tools"] = tool if i % 2 else None
    table = pa.table({"messages": [row["messages"] for row in rows] + [None],
                      "tools": [row["tools"] for row in rows] + [None],
                      "id": list(range(31))})
    pq.write_table(table, tmp_path / "chat.parquet", row_group_size=7)
    options = dict(json_keys=["messages"], append_eod=True)
    with pytest.raises(mdc.DataError, match=r"chat.parquet \(row group 4\), row 3: column "
                                            r"'messages' holds null"):
        preprocess_tasks([str(tmp_path / "chat.parquet")], str(tmp_path / "refused"),
                         chat_factory(tokenizer_dir), table_reader=ParquetReader(), **options)
    tokenizer = load_tokenizer("huggingface", os.path.join(tokenizer_dir, "tokenizer.json"))
    encoder = ChatEncoder(tokenizer, chat_template(str(_jinja(
        tmp_path, TOOLS + BUILTIN_TEMPLATES["chatml"]))))
    preprocess_tasks([str(tmp_path / "chat.parquet")], str(tmp_path / "table"),
                     lambda: encoder, table_reader=ParquetReader(), skip_bad_lines=True,
                     **options)
    preprocess_jsonl([write_rows(tmp_path / "chat.jsonl", rows)], str(tmp_path / "lines"),
                     lambda: encoder, **options)
    for suffix in ("_messages_document", "_messages_document_roles"):
        for ext in (".bin", ".idx"):
            assert filecmp.cmp(f"{tmp_path}/table{suffix}{ext}",
                               f"{tmp_path}/lines{suffix}{ext}", shallow=False)
    _check_against_transformers(tokenizer_dir, f"{tmp_path}/table_messages_document", rows,
                                template=TOOLS + BUILTIN_TEMPLATES["chatml"],
                                twin_template=TOOLS + TWIN)
