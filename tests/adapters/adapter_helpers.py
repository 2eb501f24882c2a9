"""Helpers shared by the adapter tests: a small corpus and a deadline for worker tests."""

from __future__ import annotations

import functools
import signal

import corpora
import numpy as np

import megadata_core as mdc


def deadline(seconds: int):
    """Fail (instead of hanging) a worker-based test that runs past ``seconds``."""

    def decorate(test):
        @functools.wraps(test)
        def wrapper(*args, **kwargs):
            def expire(signum, frame):
                raise TimeoutError(f"{test.__name__} ran past {seconds} s")

            previous = signal.signal(signal.SIGALRM, expire)
            signal.alarm(seconds)
            try:
                return test(*args, **kwargs)
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)

        return wrapper

    return decorate


def write_corpus(prefix: str, seed: int, documents: int = 120) -> str:
    """A uint16 corpus of ``documents`` one-sequence documents ending in EOD id 3."""
    rng = np.random.default_rng(seed)
    return corpora.write_corpus(prefix, rng.integers(1, 40, documents), rng, eod=3)


def gpt_dataset(prefix: str, cache: str, random_seed: int, sequence_length: int):
    """A GPTDataset over every document of ``prefix`` (EOD 3, one epoch), cached in
    ``cache``."""
    config = mdc.GPTDataConfig(
        random_seed=random_seed, sequence_length=sequence_length, eod_id=3, path_to_cache=cache
    )
    indexed = mdc.IndexedDataset(prefix)
    return mdc.GPTDataset(indexed, np.arange(len(indexed.document_indices) - 1), None, config)


def finishes_within(seconds: float, action, what: str) -> None:
    """Run ``action()`` in a thread; fail the test if it has not returned after ``seconds``
    (a watchdog against hangs, not a timing assertion) and re-raise what it raised."""
    import threading

    import pytest

    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:  # handed to the test
            errors.append(error)
        finally:
            done.set()

    threading.Thread(target=run, name=f"watchdog:{what}", daemon=True).start()
    if not done.wait(seconds):
        pytest.fail(f"{what} had not finished after {seconds} s")
    if errors:
        raise errors[0]
