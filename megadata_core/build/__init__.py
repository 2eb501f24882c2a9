"""Floor 5: a config and the samples wanted per split become ``[train, valid, test]``.

:func:`build_datasets` (megatron-core's ``BlendedMegatronDatasetBuilder.build``) down
its rooms: the plan (:mod:`.plan`, :mod:`.sizing`), the corpora (:mod:`.corpora`), the
members (:mod:`.members`), the splits (:mod:`.assemble`) and the build bundle
(:mod:`.bundle`). May import every floor below (ground, format, indices, cache,
datasets); nothing above it but the adapters and tools that call it.
"""

from megadata_core.build.builder import build_datasets
from megadata_core.build.plan import Job, Recipe, check_sizes, plan_build
from megadata_core.build.sizing import MemberSize, member_size

__all__ = [
    "Job",
    "MemberSize",
    "Recipe",
    "build_datasets",
    "check_sizes",
    "member_size",
    "plan_build",
]
