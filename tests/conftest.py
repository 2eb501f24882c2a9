"""Shared fixtures: megatron-core is the oracle, imported lazily and warning-free."""

from __future__ import annotations

import warnings

import pytest


@pytest.fixture(scope="session")
def megatron_indexed():
    """megatron-core's indexed_dataset module (the reference implementation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset
    return indexed_dataset
