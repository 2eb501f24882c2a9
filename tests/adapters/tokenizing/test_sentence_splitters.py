"""megadata_adapters.tokenizing.sentence_splitters: NLTK punkt as Megatron uses it, sentencex
offline, linear time."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizer_files import training_text

from megadata_adapters.tokenizing import sentence_splitters as ss
from megadata_core import DataError

nltk = pytest.importorskip("nltk")
from nltk.tokenize.punkt import (  # noqa: E402
    PunktLanguageVars,
    PunktSentenceTokenizer,
    PunktTrainer,
    save_punkt_params,
)

TEXT = (
    "  Mr. Smith went to Washington. He arrived at 5 p.m. and left!  Why?\n"
    "New paragraph here.\n\n\"Quoted sentence.\" (Parenthetical one.) The end.  \n"
)


class MegatronKeepNewlinesVars(PunktLanguageVars):
    """The expression Megatron-LM's --keep-newlines gives punkt, matched by plain re."""

    _period_context_fmt = r"""
        \S*
        %(SentEndChars)s
        \s*
        (?=(?P<after_tok>
            %(NonWord)s
            |
            (?P<next_tok>\S+)
        ))"""


@pytest.fixture(scope="module")
def punkt_params():
    trainer = PunktTrainer()
    trainer.train(" ".join(training_text()) + " " + TEXT * 3, finalize=True)
    return trainer.get_params()


@pytest.fixture
def nltk_data(tmp_path, monkeypatch, punkt_params):
    """An NLTK data directory holding a punkt_tab model for 'english'."""
    root = tmp_path / "nltk_data"
    target = root / "tokenizers" / "punkt_tab" / "english"
    target.parent.mkdir(parents=True)
    monkeypatch.setenv("NLTK_DATA", str(root))
    monkeypatch.setattr(nltk.data, "path", [str(root)] + list(nltk.data.path))
    save_punkt_params(punkt_params, dir=str(target))
    return root


@pytest.fixture
def no_nltk_model(monkeypatch, tmp_path):
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "empty")])


def test_punkt_sentences_are_nltks(nltk_data, punkt_params):
    splitter = ss.load_splitter("english")
    assert isinstance(splitter, ss.PunktSplitter) and splitter.name == "nltk punkt (english)"
    expected = PunktSentenceTokenizer(punkt_params).tokenize(TEXT)
    assert splitter.split(TEXT) == expected
    assert len(expected) >= 5 and expected[0].startswith("  Mr.")


def test_punkt_keep_newlines_matches_megatrons_expression(nltk_data, punkt_params):
    reference = PunktSentenceTokenizer(punkt_params, lang_vars=MegatronKeepNewlinesVars())
    splitter = ss.load_splitter("english", keep_newlines=True)
    sentences = splitter.split(TEXT)
    assert sentences == reference.tokenize(TEXT)
    assert any(s.endswith("\n") for s in sentences)  # newlines stay with their sentence
    assert not any(s.endswith("\n") for s in splitter.split(TEXT.replace("\n", " ")))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab.?!\" ()\n:'x", max_size=60))
def test_linear_matches_equal_finditer(text):
    expression = re.compile(
        r"\S*[.?!]\s*(?=(?P<after_tok>(?:[)\";}\]\*:@\'\({\[!?])|(?P<next_tok>\S+)))"
    )
    ours = [(m.span(), m.groupdict()) for m in ss._LinearMatches(expression).finditer(text)]
    assert ours == [(m.span(), m.groupdict()) for m in expression.finditer(text)]


def test_sentencex_is_the_offline_default(no_nltk_model):
    splitter = ss.load_splitter("english")
    assert isinstance(splitter, ss.SentencexSplitter) and splitter.name == "sentencex (en)"
    sentences = splitter.split(TEXT)
    assert sentences[0].startswith("  Mr. Smith went to Washington.")  # no split after "Mr."
    assert all(s == s.strip() for s in sentences[1:]) and sentences[-1].endswith(") The end.")
    kept = ss.load_splitter("english", keep_newlines=True).split(TEXT)
    assert "".join(kept) == TEXT.rstrip()
    assert "New paragraph here.\n\n" in kept
    assert [s.strip() for s in kept] == [s.strip() for s in sentences]
    assert ss.load_splitter("german").code == "de"


def test_texts_split_in_megatron_pieces(no_nltk_model):
    text = "a" * (ss.PIECE - 1) + "b. Next one."
    sentences = ss.load_splitter("english").split(text)
    # Megatron splits 1,000,000-character pieces separately: the cut falls before "."
    assert sentences == ["a" * (ss.PIECE - 1) + "b", ".", "Next one."]


def test_engines_and_errors(no_nltk_model, monkeypatch):
    with pytest.raises(DataError, match="NLTK punkt unavailable for --lang english: no punkt"):
        ss.load_splitter("english", engine="nltk")
    with pytest.raises(DataError, match="--sentence-splitter: 'spacy' is not one of"):
        ss.load_splitter(engine="spacy")
    monkeypatch.setitem(sys.modules, "sentencex", None)
    with pytest.raises(DataError, match="--split-sentences: no sentence splitter available"):
        ss.load_splitter("english")


def test_splitters_pickle(nltk_data):
    for engine in ("nltk", "sentencex"):
        splitter = ss.load_splitter("english", keep_newlines=True, engine=engine)
        copy = pickle.loads(pickle.dumps(splitter))
        assert copy.split(TEXT) == splitter.split(TEXT) and copy.keep_newlines


WATCHDOG = r"""
import sys
from megadata_adapters.tokenizing import sentence_splitters as ss
engine = sys.argv[1]
for text in ("x" * 300_000, "x" * 300_000 + ". Y", "a." * 150_000, ("x" * 299_998) + ".\n",
             "(" * 300_000, "Mr. " * 75_000, "a\n" * 150_000):
    for keep in (True, False):
        ss.load_splitter("english", keep_newlines=keep, engine=engine).split(text)
print("done")
"""


@pytest.mark.parametrize("engine", ["nltk", "sentencex"])
def test_linear_on_long_runs_without_whitespace(nltk_data, engine):
    """Megatron's --keep-newlines never finishes a 300,000-character token; a watchdog
    (not a timing assertion) fails a quadratic splitter."""
    result = subprocess.run(
        [sys.executable, "-c", WATCHDOG, engine], capture_output=True, text=True, timeout=300,
        cwd=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")),
        env={**os.environ, "NLTK_DATA": str(nltk_data)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "done"
