"""Sentence splitters for ``--split-sentences``: NLTK punkt (Megatron's) or sentencex.

``load_splitter(lang, keep_newlines)`` picks NLTK's punkt model for ``lang`` when one is
installed locally (``punkt_tab``, or an old ``punkt/{lang}.pickle`` that the installed
nltk still loads) -- the splitter Megatron-LM uses, giving its sentences -- and otherwise
``sentencex``, a rule-based splitter whose rules ship in its wheel (works offline).
Nothing is downloaded.

Both keep Megatron's edges: the first sentence keeps its leading whitespace, the last
loses its trailing whitespace; without ``keep_newlines`` the whitespace between
sentences is dropped, with it each sentence keeps the whitespace (newlines) after it.
Texts are split in pieces of 1,000,000 characters, as Megatron does. Time is linear in
the text on any input (Megatron's ``--keep-newlines`` expression is quadratic on long
runs without whitespace; the one here finds the same matches in linear time).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from megadata_core.errors import DataError

__all__ = ["ENGINES", "NLTK_TO_ISO", "load_splitter", "PunktSplitter", "SentencexSplitter"]

ENGINES = ("auto", "nltk", "sentencex")
PIECE = 1_000_000  # Megatron splits texts in pieces of this many characters

# NLTK's punkt model names -> ISO 639-1 codes (sentencex takes the latter).
NLTK_TO_ISO = {
    "czech": "cs", "danish": "da", "dutch": "nl", "english": "en", "estonian": "et",
    "finnish": "fi", "french": "fr", "german": "de", "greek": "el", "italian": "it",
    "malayalam": "ml", "norwegian": "no", "polish": "pl", "portuguese": "pt",
    "russian": "ru", "slovene": "sl", "spanish": "es", "swedish": "sv", "turkish": "tr",
}

_NON_SPACE = re.compile(r"\S")
_RUN = re.compile(r"\S+")


def _pieces(text: str) -> Iterator[str]:
    return (text[i : i + PIECE] for i in range(0, len(text), PIECE))


class _LinearMatches:
    """``finditer`` of an expression ``\\S*E...`` (E: a non-space character) in linear time.

    A match can only start on a non-space character, and a start that fails inside a
    run of non-space characters fails for the rest of that run (its ``\\S*`` sees a
    subset of the same candidate ends), so the run is skipped instead of retried at
    each character as ``re.finditer`` does. The matches are ``re.finditer``'s.
    """

    def __init__(self, regex: re.Pattern) -> None:
        self._regex = regex

    def finditer(self, text: str) -> Iterator[re.Match]:
        position = 0
        while (start := _NON_SPACE.search(text, position)) is not None:
            match = self._regex.match(text, start.start())
            if match is not None:
                yield match
                position = match.end()
            else:
                position = _RUN.match(text, start.start()).end()


def _keep_newlines_vars():
    """Punkt language variables whose sentence ends take the whitespace after them."""
    from nltk.tokenize.punkt import PunktLanguageVars

    class KeepNewlinesVars(PunktLanguageVars):
        def period_context_re(self):
            expression = (
                r"\S*" + self._re_sent_end_chars + r"\s*"
                r"(?=(?P<after_tok>" + self._re_non_word_chars + r"|(?P<next_tok>\S+)))"
            )
            return _LinearMatches(re.compile(expression, re.UNICODE))

    return KeepNewlinesVars()


def _punkt_parameters(lang: str):
    """The installed punkt model's parameters for ``lang``, or (None, why not)."""
    try:
        import nltk
    except ImportError:
        return None, "nltk is not installed"
    try:  # punkt_tab, nltk >= 3.8.2
        from nltk.tokenize.punkt import PunktTokenizer

        return PunktTokenizer(lang)._params, None
    except (ImportError, LookupError, ValueError, OSError):
        pass
    try:  # the format Megatron-LM loads; recent nltk refuses to unpickle it
        return nltk.data.load(f"tokenizers/punkt/{lang}.pickle")._params, None
    except LookupError:
        return None, f"no punkt model for {lang!r} under NLTK_DATA or nltk's data path"
    except Exception as error:  # noqa: BLE001 - nltk's loaders raise many kinds
        return None, f"nltk {nltk.__version__} cannot load punkt/{lang}.pickle ({error})"


class PunktSplitter:
    """NLTK punkt with the installed model for ``lang`` (Megatron-LM's sentences)."""

    def __init__(self, lang: str = "english", keep_newlines: bool = False) -> None:
        from nltk.tokenize.punkt import PunktSentenceTokenizer

        parameters, why = _punkt_parameters(lang)
        if parameters is None:
            raise DataError(f"--split-sentences: NLTK punkt unavailable for --lang {lang}: {why}")
        self.lang, self.keep_newlines = lang, bool(keep_newlines)
        self.name = f"nltk punkt ({lang})"
        if keep_newlines:
            self._punkt = PunktSentenceTokenizer(parameters, lang_vars=_keep_newlines_vars())
        else:
            self._punkt = PunktSentenceTokenizer(parameters)

    def split(self, text: str) -> list[str]:
        """Sentences of ``text`` (see the module docstring for whitespace)."""
        return [s for piece in _pieces(text) for s in self._punkt.tokenize(piece)]

    def __reduce__(self):
        return (type(self), (self.lang, self.keep_newlines))


class SentencexSplitter:
    """sentencex's rules for ``lang`` (an NLTK name such as ``english`` or an ISO code)."""

    def __init__(self, lang: str = "english", keep_newlines: bool = False) -> None:
        try:
            import sentencex
        except ImportError:
            raise DataError(
                "--split-sentences: no sentence splitter available: install sentencex "
                "(pip install sentencex), or nltk with a punkt model under NLTK_DATA"
            ) from None
        self._segment = sentencex.segment
        self.lang, self.keep_newlines = lang, bool(keep_newlines)
        self.code = NLTK_TO_ISO.get(lang.lower(), lang)
        self.name = f"sentencex ({self.code})"

    def split(self, text: str) -> list[str]:
        """Sentences of ``text`` (see the module docstring for whitespace)."""
        return [s for piece in _pieces(text) for s in self._split_piece(piece)]

    def _split_piece(self, text: str) -> list[str]:
        # sentencex's segments cover the text, each with the whitespace after it;
        # a whitespace-only segment (a paragraph break) joins the sentence before it
        sentences: list[str] = []
        for segment in self._segment(self.code, text):
            if sentences and not segment.strip():
                sentences[-1] += segment
            else:
                sentences.append(segment)
        if not sentences:
            return []
        if not self.keep_newlines:
            sentences = [sentences[0].rstrip()] + [s.strip() for s in sentences[1:]]
        sentences[-1] = sentences[-1].rstrip()
        return [s for s in sentences if s.strip()]

    def __reduce__(self):
        return (type(self), (self.lang, self.keep_newlines))


def load_splitter(lang: str = "english", keep_newlines: bool = False, engine: str = "auto"):
    """A splitter with ``split(text) -> list[str]`` and a ``name``.

    ``engine``: ``"nltk"`` (punkt; DataError when no model is installed),
    ``"sentencex"``, or ``"auto"``: punkt when its model for ``lang`` is installed,
    else sentencex.
    """
    if engine not in ENGINES:
        raise DataError(f"--sentence-splitter: {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == "nltk" or (engine == "auto" and _punkt_parameters(lang)[0] is not None):
        return PunktSplitter(lang, keep_newlines)
    return SentencexSplitter(lang, keep_newlines)
