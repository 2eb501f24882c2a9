"""The ``walk`` suite: how a config becomes datasets, counted in module visits.

One cold, cached, 3-split build of a 3-prefix weighted blend (``build_datasets`` into an
empty ``path_to_cache``) runs under ``sys.setprofile``. Every call and return event whose
frame is code of ``megadata_core`` gives the module it runs in; consecutive events in
the same module are one *stop*. Three walks: *config's path* (only the frames that hold
the config, a local or the ``.config`` of one: the path a reader takes following
``config`` through ``build_datasets``) by calls alone, and by calls and returns; and
*every frame*, calls and returns. Counted: the stops, the stops at the builder's module,
at its room and at ``gpt_dataset.py`` (how often the walk enters them), and the
*returns*: stops at a module the walk had already left. A reader following ``config``
through the build makes about these steps; fewer returns is a straighter path. No peer:
the numbers are structural, compared between commits (check out, run again).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile

import numpy as np

from bench.harness import Bench

#: The builder's module (before and after it got a room of its own), and its room.
BUILDER = ("datasets/builder.py", "build/builder.py")
BUILD_ROOM = ("datasets/builder.py", "datasets/build_plan.py", "datasets/bundle_members.py",
              "build/")
GPT_DATASET = "datasets/gpt_dataset.py"
WINDOW = 78  # the first stops a reader walks through, as the issue counted them


def _corpora(directory: str, count: int = 3, documents: int = 2000) -> list[str]:
    from megadata_core import IndexedDatasetWriter

    rng = np.random.default_rng(0)
    prefixes = []
    for number in range(count):
        prefix = os.path.join(directory, f"corpus{number}")
        with IndexedDatasetWriter(prefix, np.uint16) as writer:
            for length in rng.integers(1, 60, documents).tolist():
                writer.add_document(rng.integers(4, 1000, length), [length])
        prefixes.append(prefix)
    return prefixes


def _holds(frame, kind: type) -> bool:
    """Whether a frame holds an instance of ``kind`` in a local, or in ``.config`` of
    one (a method of an object that carries the config)."""
    return any(
        isinstance(value, kind) or isinstance(getattr(value, "config", None), kind)
        for value in frame.f_locals.values()
    )


def walk_stops(
    run, following: type | None = None, events: tuple[str, ...] = ("call", "return")
) -> list[str]:
    """The modules (paths relative to megadata_core/) of the stops of ``run()``; with
    ``following``, only frames that hold an instance of it (see :func:`_holds`); only
    ``events`` (calls alone: a return to the caller is no step of its own)."""
    import megadata_core

    root = os.path.dirname(os.path.abspath(megadata_core.__file__)) + os.sep
    stops: list[str] = []

    def profile(frame, event, arg) -> None:
        if event not in events:
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(root):
            return
        if following is not None and not _holds(frame, following):
            return
        module = filename[len(root):]
        if not stops or stops[-1] != module:
            stops.append(module)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return stops


def walk_counts(stops: list[str]) -> dict[str, int]:
    """Stops, entries into the builder and gpt_dataset.py, returns (overall and in the
    first :data:`WINDOW` stops)."""
    seen: set[str] = set()
    returns, window_returns = 0, 0
    for position, module in enumerate(stops):
        if module in seen:
            returns += 1
            window_returns += position < WINDOW
        seen.add(module)
    return {
        "stops": len(stops),
        "modules": len(seen),
        "builder.py entries": sum(module in BUILDER for module in stops),
        "build room entries": sum(module.startswith(BUILD_ROOM) for module in stops),
        "gpt_dataset entries": sum(module == GPT_DATASET for module in stops),
        "returns": returns,
        f"returns in the first {WINDOW} stops": window_returns,
    }


def suite_walk(bench: Bench) -> None:
    import megadata_core as mdc

    with tempfile.TemporaryDirectory(dir=bench.workdir) as directory:
        prefixes = _corpora(directory)
        cache = os.path.join(directory, "cache")
        config = mdc.GPTDataConfig(
            random_seed=1234, sequence_length=64, eod_id=0, split="90,5,5",
            blend=(prefixes, [0.5, 0.3, 0.2]), path_to_cache=cache,
        )
        mdc.build_datasets(config, [1, 1, 1])  # imports and first-call set-up, elsewhere
        walks = {}
        for name, following, events in (
            ("config's path, calls", mdc.GPTDataConfig, ("call",)),
            ("config's path, calls and returns", mdc.GPTDataConfig, ("call", "return")),
            ("every frame, calls and returns", None, ("call", "return")),
        ):
            cold = dataclasses.replace(config, path_to_cache=f"{cache}-{len(walks)}")
            walks[name] = walk_stops(lambda c=cold: mdc.build_datasets(c, [1000, 100, 10]),
                                     following, events)
    for walk, stops in walks.items():
        for name, value in walk_counts(stops).items():
            bench.row(f"walk, {walk}: {name}", "count", "lower", float(value),
                      "n/a (structure)", 1)
        bench.note(f"{walk}, first stops: " + " > ".join(stops[:WINDOW]))
