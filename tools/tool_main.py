"""``run(main)``: absl's ``app.run`` for the programs in tools/, with help that exits 0.

absl prints the usage for ``--help`` (``-?``), ``--helpshort``, ``--helpfull`` and
``--helpxml`` and then exits with status 1, so ``python tools/x.py --help && ...`` fails
although nothing went wrong. ``run`` replaces those four flags with ones that print the
same text and exit 0; everything else is ``app.run``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

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
    ("help", "?", "show this help", "short"),
    ("helpshort", None, "show this help", "short"),
    ("helpfull", None, "show full help", "full"),
    ("helpxml", None, "like --helpfull, but generates XML output", "xml"),
)


def run(main: Callable[[list[str]], int | None]) -> None:
    """``app.run(main)``, with the help flags exiting 0."""
    app.define_help_flags()  # idempotent: app.run will not define them again
    for name, short_name, text, form in _HELP_FLAGS:
        for registered in (name, short_name):
            if registered is not None and registered in flags.FLAGS:
                delattr(flags.FLAGS, registered)
        flags.DEFINE_flag(_HelpFlag(name, short_name, text, form))
    app.run(main)
