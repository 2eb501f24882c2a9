"""Megatron-LM command-line data forms -> blend / blend_per_split / split."""

from __future__ import annotations

import json
import warnings

import pytest

import megadata_core as mdc
from megadata_core.datasets.config import (
    LEGACY_DEFAULT_SPLIT,
    blend_from_args,
    blend_from_list,
)


@pytest.fixture(scope="module")
def get_blend_from_list():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.utils import get_blend_from_list
    return get_blend_from_list


@pytest.mark.parametrize(
    "items",
    [
        ["0.3", "/a/prefix", "0.7", "/b/prefix"],
        ["30", "a", "70", "b"],
        ["/a/prefix", "/b/prefix"],
        ["/only"],
        ["/a", "/b", "/c"],
        ["1e-3", "x", "2", "y"],
        ["1", "2"],  # weight 1 for a prefix named "2", as Megatron reads it
    ],
)
def test_blend_from_list_matches_megatron(get_blend_from_list, items):
    theirs = get_blend_from_list(items)
    assert blend_from_list(items) == (theirs[0], theirs[1])
    assert blend_from_list(" ".join(items)) == (theirs[0], theirs[1])  # one quoted string


def test_a_quoted_data_path_element_is_split():
    assert blend_from_list(["0.3 /a 0.7 /b"]) == (["/a", "/b"], [0.3, 0.7])
    assert blend_from_list(None) is None


def test_mixed_weights_raise():
    with pytest.raises(mdc.DataError, match="data_path: '/b' is not a weight"):
        blend_from_list("0.3 /a /b /c")
    with pytest.raises(mdc.DataError, match="data_path: no dataset prefixes"):
        blend_from_list("   ")


@pytest.mark.parametrize("items", ["0.5 /a /b", "/a 0.5 /b", "/a /b 7", "/a 0.3 /b 0.7", "1"])
def test_a_weight_without_its_pair_raises(items):
    """Megatron reads these as prefixes ("0.5" among them) and fails at open time."""
    with pytest.raises(mdc.DataError, match="data_path: '[0-9.]+' looks like a weight"):
        blend_from_list(items)
    assert blend_from_list(items.replace("0.", "./0.").replace(" 7", " ./7")
                           .replace("1", "./1"))[1] is None


def test_data_path_default_split():
    fields = blend_from_args(data_path="0.3 /a 0.7 /b")
    assert fields == {"blend": (["/a", "/b"], [0.3, 0.7]), "blend_per_split": None,
                      "split": LEGACY_DEFAULT_SPLIT}
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8, **fields)
    assert config.blend == (("/a", "/b"), (0.3, 0.7))
    assert config.split_fractions == pytest.approx((0.969, 0.03, 0.001))
    assert blend_from_args(data_path=["/a"], split="98,2")["split"] == "98,2"


def test_data_args_file(tmp_path):
    path = tmp_path / "data_args.txt"
    path.write_text("0.5 /x/one\n0.5 /x/two\n")
    fields = blend_from_args(data_args_path=str(path), split="9,1")
    assert fields["blend"] == (["/x/one", "/x/two"], [0.5, 0.5])
    with pytest.raises(mdc.DataError, match="data_args_path: cannot read"):
        blend_from_args(data_args_path=str(tmp_path / "missing.txt"))
    with pytest.raises(mdc.DataError, match="not both"):
        blend_from_args(data_args_path=str(path), data_path="/a")


def test_per_split_paths(tmp_path):
    fields = blend_from_args(train_data_path="0.4 /t1 0.6 /t2", valid_data_path=["/v"])
    assert fields == {
        "blend": None,
        "blend_per_split": [(["/t1", "/t2"], [0.4, 0.6]), (["/v"], None), None],
        "split": None,
    }
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8, **fields)
    assert config.blend_per_split[2] is None
    path = tmp_path / "per_split.json"
    path.write_text(json.dumps({"train": "1 /t1 3 /t2", "valid": ["/v1", "/v2"], "test": None}))
    fields = blend_from_args(per_split_data_args_path=str(path))
    assert fields["blend_per_split"] == [(["/t1", "/t2"], [1.0, 3.0]), (["/v1", "/v2"], None),
                                         None]
    with pytest.raises(mdc.DataError, match="split: '98,2' is incompatible"):
        blend_from_args(train_data_path="/t", split="98,2")
    with pytest.raises(mdc.DataError, match="incompatible"):
        blend_from_args(data_path="/a", train_data_path="/t")
    path.write_text("{not json")
    with pytest.raises(mdc.DataError, match="per_split_data_args_path: .* is not JSON"):
        blend_from_args(per_split_data_args_path=str(path))


def test_no_data_arguments_is_mock():
    assert blend_from_args() == {"blend": None, "blend_per_split": None, "split": None}


def test_config_takes_a_data_path_string():
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8, blend="2 /a 6 /b", split="1")
    assert config.blend == (("/a", "/b"), (2.0, 6.0))
    with pytest.raises(mdc.DataError, match="blend weights: every weight is 0"):
        mdc.GPTDataConfig(random_seed=1, sequence_length=8, blend="0 /a 0 /b", split="1")
