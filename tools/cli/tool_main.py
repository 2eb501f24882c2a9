"""``run(main)``: absl's ``app.run`` for the programs in tools/: help that exits 0, and
flag mistakes as one line.

absl prints the usage for ``--help`` (``-?``), ``--helpshort``, ``--helpfull`` and
``--helpxml`` and then exits with status 1, so ``python tools/x.py --help && ...`` fails
although nothing went wrong; ``-h`` is an unknown flag to it. ``run`` replaces those flags
with ones that print the same text and exit 0, and adds ``-h``.

A flag it cannot parse is one line on stderr and exit status 1, naming the flag and the
closest valid name: ``error: --dry_rnu: unknown flag; did you mean --dry_run?``, and for
an ml_collections config override ``error: --config.sequence_lenght: no such config
field; did you mean --config.sequence_length?`` (absl prints ``FATAL Flags parsing
error`` and two lines; ml_collections a traceback).
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
import re
import sys
from collections.abc import Callable, Iterable

from absl import app, flags


class _HelpFlag(flags.BooleanFlag):
    """A help flag: prints the short or full usage (or the XML help) and exits 0."""

    def __init__(self, name: str, short_name: str | None, text: str, form: str) -> None:
        super().__init__(name, False, text, short_name=short_name, allow_hide_cpp=True)
        self._form = form

    def parse(self, argument: object) -> None:
        if not self._parse(argument):
            return
        if self._form == "xml":
            flags.FLAGS.write_help_in_xml_format(sys.stdout)
        else:
            app.usage(shorthelp=self._form == "short", writeto_stdout=True)
            if self._form == "short":
                print("\nTry --helpfull to get a list of all flags.")
        sys.stdout.flush()
        sys.exit(0)


_HELP_FLAGS = (
    ("help", "h", "show this help", "short"),
    ("?", None, "show this help", "short"),
    ("helpshort", None, "show this help", "short"),
    ("helpfull", None, "show full help", "full"),
    ("helpxml", None, "like --helpfull, but generates XML output", "xml"),
)


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` (difflib), or None when none is close."""
    matches = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, candidates: Iterable[str], prefix: str = "--") -> str:
    """``"; did you mean --x?"`` for the closest candidate, or ``""``."""
    best = closest(name, candidates)
    return f"; did you mean {prefix}{best}?" if best else ""


def fail(message: str) -> None:
    """Print ``error: message`` (one line) on stderr and exit with status 1; a module of
    the command line imported by its bare name (a config file of 0.1: ``from data_config
    import base_config``) is named as it is installed now."""
    message = " ".join(str(message).split())
    bare = re.search(r"No module named '(\w+)'", message)
    if bare and (importlib.resources.files("megadata_cli") / f"{bare[1]}.py").is_file():
        message += f"; it is megadata_cli.{bare[1]} now (from megadata_cli.{bare[1]} import ...)"
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def _flag_names() -> list[str]:
    names = []
    for name, flag in flags.FLAGS._flags().items():  # noqa: SLF001 - absl's registry
        names.append(name)
        if isinstance(flag, flags.BooleanFlag):
            names.append(f"no{name}")
    return names


def _config_fields(config: object, path: str = "") -> list[str]:
    """Every field path of an ml_collections ConfigDict (``a``, ``a.b``, ...)."""
    items = getattr(config, "items", None)
    if items is None:
        return []
    fields = []
    for key, value in items():
        name = f"{path}{key}"
        fields.append(name)
        fields += _config_fields(value, f"{name}.")
    return fields


def _load_config(name: str, argv: list[str]) -> object:
    """The config that ``--name=FILE`` in ``argv`` loads without its overrides (the
    failed parse left the flag empty), or None."""
    flag = flags.FLAGS[name]
    if not type(flag).__module__.startswith("ml_collections"):
        return None
    from ml_collections import config_flags

    given = [arg for arg in argv[1:] if re.match(rf"--?{re.escape(name)}=", arg)]
    fresh = flags.FlagValues()
    args = [argv[0], *given[-1:]]
    config_flags.DEFINE_config_file(name, None, "", flag_values=fresh, sys_argv=args)
    try:
        fresh(args)
        return fresh[name].value
    except Exception:  # noqa: BLE001 - a config that does not load: said by the caller
        return None


def _bad_override(argv: list[str]) -> str | None:
    """The message for the first ``--<config flag>.<path>`` whose path the loaded config
    lacks, or None."""
    for arg in argv[1:]:
        match = re.match(r"--?([A-Za-z_]\w*)\.([\w.]+)(?:=|$)", arg)
        if match is None or match[1] not in flags.FLAGS:
            continue
        config = _load_config(match[1], argv)
        fields = _config_fields(config)
        if fields and match[2] not in fields:
            hint = did_you_mean(match[2], fields, f"--{match[1]}.")
            return f"--{match[1]}.{match[2]}: no such config field{hint}"
    return None


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with every mistake as one ``error:`` line (exit 1)."""
    try:
        return flags.FLAGS(argv)
    except flags.UnrecognizedFlagError as error:
        name = error.flagname
        if "." in name:  # --config.x: an override of a config that lacks x
            fail(_bad_override([argv[0], f"--{name}"]) or f"--{name}: unknown flag")
        fail(f"--{name}: unknown flag{did_you_mean(name, _flag_names())}")
    except flags.Error as error:
        message = str(error)
        if "Traceback (most recent call last)" in message:  # a config file that failed
            head = message.split("Traceback (most recent call last)")[0]
            message = f"{head.strip()} {message.strip().splitlines()[-1].strip()}"
        fail(message)
    except Exception as error:  # noqa: BLE001 - ml_collections raises what it meets
        fail(_bad_override(argv) or f"{type(error).__name__}: {error}")
    return []  # not reached


def shipped_configs(argv: list[str]) -> list[str]:
    """``argv`` with ``--config=NAME`` (a bare name, no such file here) replaced by the path
    of the config of that name shipped in ``megadata_cli.configs`` (``single_corpus``,
    ``weighted_blend``, ...), so an installed command needs no checkout's configs/."""
    out = list(argv)
    for i, arg in enumerate(out):
        match = re.fullmatch(r"(--?config=)([A-Za-z_]\w*)", arg)
        if match is None or os.path.exists(match[2]):
            continue
        shipped = importlib.resources.files("megadata_cli.configs") / f"{match[2]}.py"
        if shipped.is_file():
            out[i] = f"{match[1]}{shipped}"
    return out


def run(main: Callable[[list[str]], int | None], doc: str | None = None) -> None:
    """``app.run(main)``, with the help flags exiting 0 (``-h`` among them), flag errors as
    one line, and ``--config=NAME`` naming a shipped config."""
    sys.argv[:] = shipped_configs(sys.argv)
    # absl's usage is the __main__ module's docstring: a console script's wrapper and a
    # checkout's tools/X.py have none of their own, the command's module has it. Its short
    # help lists the flags key to the module named by sys.argv[0]: the
    # command module's.
    sys.modules["__main__"].__doc__ = doc or sys.modules[main.__module__].__doc__
    for flag in flags.FLAGS.get_key_flags_for_module(main.__module__):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    app.define_help_flags()  # idempotent: app.run will not define them again
    for name, short_name, _, _ in _HELP_FLAGS:
        for registered in (name, short_name):
            if registered is not None and registered in flags.FLAGS:
                delattr(flags.FLAGS, registered)
    for name, short_name, text, form in _HELP_FLAGS:
        flags.DEFINE_flag(_HelpFlag(name, short_name, text, form))
    app.run(main, flags_parser=parse_flags)
