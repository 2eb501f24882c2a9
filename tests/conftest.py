"""Shared fixtures and the Hypothesis profiles.

``MEGADATA_HYPOTHESIS=ci`` (the default; CI and ``tools/test.sh``): derandomized, so a
run passes or fails the same way on every machine. ``MEGADATA_HYPOTHESIS=explore``
(``tools/test.sh --explore``): random seeds and ``MEGADATA_EXPLORE_FACTOR`` (default 5)
times each test's examples, to look for new counterexamples; each one found becomes an
explicit ``@example`` so that the deterministic run keeps checking it.
``MEGADATA_HYPOTHESIS_SCALE`` (default 1) multiplies each test's examples in either profile
(at least :data:`MIN_EXAMPLES`): ``tools/test.sh`` runs the Python 3.12 and 3.13 legs with
0.25, the same tests derandomized with fewer generated examples (explicit ``@example``s
all run); 3.11 runs them all.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings

import pytest
from hypothesis import settings

PROFILE = os.environ.get("MEGADATA_HYPOTHESIS", "ci")
if PROFILE not in ("ci", "explore"):
    raise pytest.UsageError(f"MEGADATA_HYPOTHESIS: {PROFILE!r} is not 'ci' or 'explore'")
# Helpers several test folders share (oracles, corpora, cache damage), importable by name.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(PROFILE)


@pytest.fixture(autouse=True, scope="session")
def _proof_cache_of_the_session(tmp_path_factory):
    """Load-time proofs' verdicts (``megadata_adapters.tokenizing.proof_cache``) kept in this
    session's own
    directory (subprocesses inherit it), never in the user's cache."""
    before = os.environ.get("MEGADATA_CACHE")
    os.environ["MEGADATA_CACHE"] = str(tmp_path_factory.mktemp("megadata-cache"))
    yield
    if before is None:
        os.environ.pop("MEGADATA_CACHE", None)
    else:
        os.environ["MEGADATA_CACHE"] = before


@pytest.fixture(autouse=True)
def _sigint_handler_restored():
    """A tool run in-process sets its own SIGINT handler (``tools/interrupts``: ignored
    once its work is done); put back the one each test started with, so no test sees
    another's."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not handler and handler is not None:
        signal.signal(signal.SIGINT, handler)


def pytest_report_header(config) -> str:
    return f"hypothesis profile: {PROFILE}"


MIN_EXAMPLES = 5


def pytest_collection_modifyitems(config, items) -> None:
    """Scale every test's own ``max_examples`` (set by ``@settings``): by
    ``MEGADATA_EXPLORE_FACTOR`` in explore mode, by ``MEGADATA_HYPOTHESIS_SCALE``."""
    factor = float(os.environ.get("MEGADATA_HYPOTHESIS_SCALE", "1"))
    if PROFILE == "explore":
        factor *= int(os.environ.get("MEGADATA_EXPLORE_FACTOR", "5"))
    if factor == 1:
        return
    seen = set()
    for item in items:
        test = getattr(item, "obj", None)
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if current is None or id(test) in seen:
            continue
        seen.add(id(test))
        examples = max(MIN_EXAMPLES, round(current.max_examples * factor))
        test._hypothesis_internal_use_settings = settings(
            current, max_examples=min(examples, max(current.max_examples, examples)),
            derandomize=PROFILE != "explore",
        )


@pytest.fixture(scope="session")
def megatron_indexed():
    """megatron-core's indexed_dataset module (the reference implementation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset
    return indexed_dataset
