"""GPTDataConfig: Megatron's field names and defaults, validation by DataError."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

import megadata_core as mdc


def test_field_names_match_megatron():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    theirs = {field.name for field in dataclasses.fields(GPTDatasetConfig)}
    ours = {field.name for field in dataclasses.fields(mdc.GPTDataConfig)}
    extras = {
        "eod_id", "pad_id", "shuffle", "blend_order", "packing", "document_masking",
        "mask_cross_document_labels", "max_open_files", "blend_schedule", "source_ids",
        "packing_alignment",
        # megatron-core PR #5017's names (not in 0.16.1)
        "train_on_assistant_responses_only", "train_on_thinking_traces", "train_on_tool_calls",
    }
    assert extras <= ours
    assert ours - extras <= theirs
    defaults = GPTDatasetConfig.__dataclass_fields__
    for name in ours - extras:
        ours_default = mdc.GPTDataConfig.__dataclass_fields__[name].default
        theirs_default = defaults[name].default
        if theirs_default is None and isinstance(ours_default, bool):
            continue  # Megatron's Optional[bool] switches (asserted set) default to False
        assert ours_default == theirs_default, name


def test_defaults_and_frozen():
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8)
    assert config.pad_id == -1 and config.eod_id is None
    assert config.shuffle == "megatron" and config.blend_order == "balanced"
    assert config.create_attention_mask and config.add_extra_token_to_sequence
    assert config.drop_last_partial_validation_sequence and config.mmap_bin_files
    assert config.mid_level_dataset_surplus == 0.005
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.sequence_length = 9
    hash(
        mdc.GPTDataConfig(random_seed=1, sequence_length=8, blend=(["a", "b"], [1, 2]), split="9,1")
    )


def test_blend_is_normalized():
    config = mdc.GPTDataConfig(
        random_seed=0, sequence_length=4, blend=[["a", "b"], [0.3, 0.7]], split="98,2,0"
    )
    assert config.blend == (("a", "b"), (0.3, 0.7))
    assert config.split_fractions == (0.98, 0.02, 0.0)
    per_split = mdc.GPTDataConfig(
        random_seed=0, sequence_length=4, blend_per_split=[(["a"], None), None, (["c"], [1.0])]
    )
    assert per_split.blend_per_split == ((("a",), None), None, (("c",), (1.0,)))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"sequence_length": 0}, "sequence_length"),
        ({"sequence_length": -5}, "sequence_length"),
        ({"sequence_length": 8.0}, "sequence_length"),
        ({"random_seed": -1}, "random_seed"),
        ({"random_seed": 2**32}, "random_seed"),
        ({"shuffle": "random"}, "shuffle"),
        ({"blend_order": "fast"}, "blend_order"),
        ({"reset_position_ids": None}, "reset_position_ids"),
        ({"eod_mask_loss": "yes"}, "eod_mask_loss"),
        ({"mid_level_dataset_surplus": -0.1}, "mid_level_dataset_surplus"),
        ({"eod_id": 1.5}, "eod_id"),
        ({"pad_id": 2**70}, "pad_id"),
        ({"split": "0,0,0"}, "split"),
        ({"split": "1,2,3,4"}, "split"),
        ({"blend": (["a", "b"], [1.0])}, "blend"),
        ({"blend": (["a"], None)}, "split"),
        ({"blend": (["a"], None), "split": "1", "blend_per_split": [(["a"], None), None, None]},
         "blend"),
        ({"blend_per_split": [(["a"], None)]}, "blend_per_split"),
        ({"blend": (["/a"], ["abc"]), "split": "1,0,0"}, r"weights \[.abc.\] must be"),
        ({"blend": (["/a"], [None]), "split": "1,0,0"}, "blend: weights"),
        ({"blend": "0.5 /a /b", "split": "1,0,0"}, "blend: '0.5' looks like a weight"),
        ({"blend": "/a 0.5 /b", "split": "1,0,0"}, "blend: '0.5' looks like a weight"),
        ({"blend_per_split": ["/a 2 /b 3", None, None]}, r"blend_per_split\[train\]: '2'"),
    ],
)  # fmt: skip
def test_bad_values_name_the_field(changes, field):
    kwargs = {"random_seed": 1, "sequence_length": 8, **changes}
    with pytest.raises(mdc.DataError, match=field):
        mdc.GPTDataConfig(**kwargs)
