"""Floor 5: a config and the samples wanted per split become ``[train, valid, test]``.

:func:`build_datasets` (megatron-core's ``BlendedMegatronDatasetBuilder.build``) down
its rooms: the plan and the members' sizes (:mod:`.plan`), the corpora, the members and
the splits made of them (:mod:`.members`) and the build bundle
(:mod:`.bundle`). May import every floor below (ground, format, indices, cache,
datasets); nothing above it but the adapters and tools that call it.
"""

from megadata_core.build.builder import build_datasets
from megadata_core.build.plan import Job, MemberSize, Recipe, check_sizes, member_size, plan_build

__all__ = [
    "Job",
    "MemberSize",
    "Recipe",
    "build_datasets",
    "check_sizes",
    "member_size",
    "plan_build",
]
