"""The benchmark suites of ``python tools/bench.py SUITE``, one module each.

``format``, ``gpt``, ``builder``, ``blend``, ``loaders``, ``cloud``, ``megatron``,
``preprocess``, ``packing``, ``scale``, ``walk``, ``schedule``, ``provenance``, ``stream``,
``chat``
(:data:`SUITES`); the
harness they share (:mod:`bench.harness`: the report, measuring, comparing), the cache
states they time (:mod:`bench.cache_states`) and the peers' imports (:mod:`bench.peers`).
Imported as ``bench`` with tools/ on the path (as ``python tools/bench.py`` runs): this
package, not tools/bench.py, is what ``import bench`` finds there.
"""

from collections.abc import Callable

from bench.blend import suite_blend
from bench.builder import suite_builder
from bench.chat import suite_chat
from bench.cloud import suite_cloud
from bench.format import suite_format
from bench.gpt import suite_gpt
from bench.harness import Bench
from bench.loaders import suite_loaders
from bench.maxtext import suite_maxtext
from bench.megatron import suite_megatron
from bench.packing import suite_packing
from bench.preprocess_scale import suite_preprocess_scale
from bench.provenance import suite_provenance
from bench.scale import suite_scale
from bench.schedule import suite_schedule
from bench.stream import suite_stream
from bench.walk import suite_walk

# Adding a suite: write ``def suite_x(bench: Bench) -> None`` and list it here.
SUITES: dict[str, Callable[[Bench], None]] = {
    "format": suite_format,
    "gpt": suite_gpt,
    "builder": suite_builder,
    "blend": suite_blend,
    "loaders": suite_loaders,
    "cloud": suite_cloud,
    "megatron": suite_megatron,
    "maxtext": suite_maxtext,
    "preprocess": suite_preprocess_scale,
    "packing": suite_packing,
    "scale": suite_scale,
    "walk": suite_walk,
    "schedule": suite_schedule,
    "provenance": suite_provenance,
    "stream": suite_stream,
    "chat": suite_chat,
}
