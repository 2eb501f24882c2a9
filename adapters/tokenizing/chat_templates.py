"""A model's chat template, rendered as transformers renders it.

API::

    template = ChatTemplate.from_tokenizer_dir("path/to/model")   # its chat_template
    template = ChatTemplate.builtin("chatml")                      # or "llama3"
    template = ChatTemplate(source, variables={"bos_token": "<s>"}, end_of_turn=None)
    text = template.render(messages)

Rendering is transformers': the environment of ``transformers.utils.chat_template_utils``
(an ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
``tojson``, ``raise_exception``, ``strftime_now``, ``dict`` and ``namespace``; ``{%
generation %}`` renders its body), the messages as ``apply_chat_template`` passes them
(None values dropped, reasoning under ``thinking`` too), the tokenizer's named special
tokens as variables, ``add_generation_prompt=False``. Ids are the rendered text encoded
with ``add_special_tokens=False``, as ``apply_chat_template(..., tokenize=True)`` does.

Each token's role in a rendered conversation, proven: :mod:`.chat_roles`.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from datetime import datetime

from megadata_core.errors import DataError

__all__ = [
    "BUILTIN_TEMPLATES",
    "ChatTemplate",
    "SPECIAL_TOKEN_NAMES",
    "compile_template",
]

#: Named templates (add_generation_prompt kept as their originals have it).
BUILTIN_TEMPLATES = {
    "chatml": (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    # Meta-Llama-3-8B-Instruct's (it trims every content).
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>"
        "\n\n' }}{% endif %}"
    ),
}
_BUILTIN_VARIABLES = {"llama3": {"bos_token": "<|begin_of_text|>"}}

# transformers' SPECIAL_TOKENS_ATTRIBUTES: the variables apply_chat_template passes.
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                       "cls_token", "mask_token")

_REASONING_ALIASES = ("reasoning_content", "thinking", "reasoning")


@functools.lru_cache(maxsize=16)
def compile_template(source: str):
    """A chat template compiled in transformers' environment (``jinja2.Template``)."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: its body (the tracking of the
        assistant mask is transformers' business, not the text's)."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body
                                          ).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a "
                    f"namespace, but got {name!r}.")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateError as error:
        raise DataError(f"chat template does not compile: {error}") from None


def _template_messages(messages: Sequence[dict]) -> list[dict]:
    """Messages as apply_chat_template gives them to the template: None values dropped,
    a reasoning segment under ``thinking`` and ``reasoning_content`` both."""
    result = []
    for message in messages:
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[key] for key in _REASONING_ALIASES if key in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        result.append(message)
    return result


def _token_text(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class ChatTemplate:
    """A Jinja chat template, the variables it is rendered with (the tokenizer's named
    special tokens), and an optional explicit end-of-turn text."""

    def __init__(self, source: str, *, name: str = "chat_template",
                 variables: dict[str, str] | None = None,
                 end_of_turn: str | None = None) -> None:
        if not isinstance(source, str) or not source:
            raise DataError(f"{name}: a chat template must be a non-empty string")
        if end_of_turn is not None and (not isinstance(end_of_turn, str) or not end_of_turn):
            raise DataError(f"{name}: end_of_turn must be a non-empty string, got "
                            f"{end_of_turn!r}")
        self.source = source
        self.name = name
        self.variables = dict(variables or {})
        self.end_of_turn = end_of_turn
        self._compiled = compile_template(source)

    @classmethod
    def builtin(cls, name: str, *, variables: dict[str, str] | None = None,
                end_of_turn: str | None = None) -> ChatTemplate:
        """A named template of ``BUILTIN_TEMPLATES`` ("chatml", "llama3")."""
        if name not in BUILTIN_TEMPLATES:
            raise DataError(f"chat template {name!r} is not one of "
                            f"{', '.join(sorted(BUILTIN_TEMPLATES))}")
        merged = {**_BUILTIN_VARIABLES.get(name, {}), **(variables or {})}
        return cls(BUILTIN_TEMPLATES[name], name=name, variables=merged,
                   end_of_turn=end_of_turn)

    @classmethod
    def from_tokenizer_dir(cls, path: str | os.PathLike, *,
                           end_of_turn: str | None = None) -> ChatTemplate:
        """The template of a tokenizer directory, as transformers loads it:
        ``chat_template.jinja`` if present, else ``tokenizer_config.json``'s
        ``chat_template`` (a string, or named templates: ``default``); the variables are
        the named special tokens of ``special_tokens_map.json`` and
        ``tokenizer_config.json`` (the latter wins)."""
        directory = os.fspath(path)
        if "://" in directory:
            raise DataError(f"{directory}: a tokenizer directory must be local")
        if not os.path.isdir(directory):
            raise DataError(f"{directory}: no such tokenizer directory")
        configs = {}
        for file in ("special_tokens_map.json", "tokenizer_config.json"):
            full = os.path.join(directory, file)
            if os.path.isfile(full):
                try:
                    with open(full, encoding="utf-8") as stream:
                        configs[file] = json.load(stream)
                except (OSError, ValueError) as error:
                    raise DataError(f"{full}: not readable JSON: {error}") from None
                if not isinstance(configs[file], dict):
                    raise DataError(f"{full}: not a JSON object")
        variables = {}
        for config in configs.values():
            for key in SPECIAL_TOKEN_NAMES:
                text = _token_text(config.get(key))
                if text is not None:
                    variables[key] = text
        jinja_file = os.path.join(directory, "chat_template.jinja")
        config_file = os.path.join(directory, "tokenizer_config.json")
        if os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as stream:
                return cls(stream.read(), name=jinja_file, variables=variables,
                           end_of_turn=end_of_turn)
        source = configs.get("tokenizer_config.json", {}).get("chat_template")
        if isinstance(source, list):
            named = {entry.get("name"): entry.get("template") for entry in source
                     if isinstance(entry, dict)}
            if "default" not in named:
                raise DataError(f"{config_file}: chat_template names "
                                f"{', '.join(map(str, named))} but no 'default'")
            source = named["default"]
        if not isinstance(source, str) or not source:
            raise DataError(f"{directory}: no chat template (no chat_template.jinja, no "
                            "chat_template in tokenizer_config.json)")
        return cls(source, name=config_file, variables=variables, end_of_turn=end_of_turn)

    def render(self, messages: Sequence[dict]) -> str:
        """The rendered text of one conversation (jinja2's errors as they are): its
        messages, and the ``tools`` of a ``Conversation`` (None otherwise)."""
        return self._compiled.render(messages=_template_messages(messages),
                                     tools=getattr(messages, "tools", None),
                                     documents=None, add_generation_prompt=False,
                                     **self.variables)

    def __repr__(self) -> str:
        return f"ChatTemplate({self.name!r})"

