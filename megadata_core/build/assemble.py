"""One split from its recipe and its built members: a GPTDataset, a list, or a blend."""

from __future__ import annotations

from collections.abc import Sequence

from megadata_core.build.plan import Job, Recipe
from megadata_core.datasets.blended_dataset import BlendedDataset
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.datasets.lazy_members import LazyMembers


def blend_inputs(recipe: Recipe, members) -> tuple[Sequence[float], int | None]:
    """A blend recipe's weights and size (weights None: the members' lengths, and the size
    capped by their sum, as Megatron's int weights)."""
    if recipe.weights is not None:
        return recipe.weights, recipe.size
    lengths: list[int] = (
        members.lengths.tolist() if isinstance(members, LazyMembers)
        else [len(dataset) for dataset in members]
    )
    size = recipe.size
    if size is not None:
        size = min(size, sum(lengths))
    return lengths, size


def blend_samples(recipe: Recipe, built: dict[Job, GPTDataset]) -> int:
    """Samples of a blend recipe (an exhaustive blend holds the sum of the weights)."""
    weights, size = blend_inputs(recipe, [built[job] for job in recipe.jobs])
    # (no size: weights None, so the members' int lengths; a weighted blend has a size)
    return int(sum(weights)) if size is None else size


def assemble(
    recipe: Recipe | None,
    built: dict[Job, GPTDataset],
    config,
    *,
    arrays: dict | None = None,
    use_cache: bool = True,
    members: LazyMembers | None = None,
    origin: str | None = None,
) -> GPTDataset | BlendedDataset | list[GPTDataset] | LazyMembers | None:
    """One split from its recipe and the built datasets (a blend's index ``arrays``
    given, from ``origin``, or built in memory without ``use_cache``; a blend's
    ``members`` given, made at first read)."""
    if recipe is None:
        return None
    datasets = members if members is not None else [built[job] for job in recipe.jobs]
    if recipe.kind == "single":
        return datasets[0]
    if recipe.kind == "list":
        return datasets
    weights, size = blend_inputs(recipe, datasets)
    return BlendedDataset(
        datasets, weights, size, config, arrays=arrays, use_cache=use_cache, origin=origin
    )
