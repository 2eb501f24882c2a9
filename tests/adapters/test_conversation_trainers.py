"""The role-based loss mask of a conversation corpus reaches every trainer unchanged.

One conversation corpus (tokens + a roles sibling) blended with a plain corpus
(tests/helpers/conversation_corpora.py). For each trainer's view of the same samples --
Grain (``GrainSource``, Grain's own ``MapDataset``, ``batched_dataset`` in process and
from a worker), torch (``TorchDataset`` under a ``DataLoader`` with a ``batch_sampler``),
the Megatron drop-in (its builder's blend and its one-corpus ``GPTDataset``), MaxText's
keys (``targets_segmentation``) and its data config source -- the mask equals the core's
``loss_mask``, and both equal the oracle read off the roles directly: no label of a role
that does not train, none across conversations, every plain label. The JSON data config
(MaxText's ``grain_train_files``, torchtitan's ``dataset_path``) takes the three
``train_on_*`` switches. MaxText's own file types (mmap_npy, mmap), which serve text,
warn that they train every label. torchtitan's ``labels`` (-100), its Config's switches,
and MaxText's own pipeline run in their legs (tests/trainers/test_torchtitan.py,
tests/trainers/test_maxtext.py).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conversation_corpora import SEQ, Corpora, trained_roles

import megadata_core as mdc
from megadata_adapters.trainers import data_json
from megadata_adapters.trainers.maxtext import keys as mx_keys
from megadata_core.format.roles import Role

SAMPLES = 80
BATCH = 4


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> Corpora:
    return Corpora(str(tmp_path_factory.mktemp("conversations")))


def core_train(corpora: Corpora, **switches) -> mdc.BlendedDataset:
    config = mdc.GPTDataConfig(random_seed=7, sequence_length=SEQ,
                               **corpora.blend_fields(), **switches)
    return mdc.build_datasets(config, [SAMPLES, None, None])[0]


@pytest.fixture(scope="module")
def train(corpora):
    return core_train(corpora)


@pytest.fixture(scope="module")
def expected(corpora, train) -> dict[str, np.ndarray]:
    """The core's batch of every sample, its loss mask checked against the oracle."""
    batch = train.__getitems__(np.arange(len(train)))
    check_against_roles(corpora, batch["tokens"], batch["labels"], batch["loss_mask"])
    return batch


def check_against_roles(corpora: Corpora, tokens, labels, mask, roles=None) -> None:
    """``mask`` [B, S] trains exactly the oracle's labels; the blend has both members'
    rows, and conversation labels of roles that do not train are all 0."""
    roles = trained_roles() if roles is None else roles
    tokens, labels, mask = (np.asarray(a) for a in (tokens, labels, mask))
    np.testing.assert_array_equal(mask != 0, corpora.expected_mask(tokens, labels, roles))
    chat = corpora.chat_rows(tokens)
    assert chat.any() and (~chat).any()
    label_roles = corpora.label_roles(labels[chat])
    untrained = np.isin(label_roles, sorted(set(map(int, Role)) - set(map(int, roles))))
    assert untrained.any() and not mask[chat][untrained].any()
    assert mask[chat].any() and mask[~chat].all()


# -- Grain ------------------------------------------------------------------------------

def test_grain_source_and_grains_own_datasets(train, expected):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    import grain.python as grain

    source = grain_source.GrainSource(train)
    for index in (0, 5, len(train) - 1):
        np.testing.assert_array_equal(source[index]["loss_mask"], expected["loss_mask"][index])
    np.testing.assert_array_equal(source.__getitems__(range(len(train)))["loss_mask"],
                                  expected["loss_mask"])
    batches = list(grain.MapDataset.source(source).batch(BATCH))
    np.testing.assert_array_equal(np.concatenate([b["loss_mask"] for b in batches]),
                                  expected["loss_mask"])
    # in process, and from a worker (the packed hand-over: an all-equal mask would travel
    # as a recipe, this one must travel as its values)
    for workers in (0, 1):
        micro = list(grain_source.batched_dataset(train, micro_batch_size=BATCH,
                                                  worker_count=workers))
        assert len(micro) == len(train) // BATCH
        for step, batch in enumerate(micro):
            rows = slice(step * BATCH, (step + 1) * BATCH)
            np.testing.assert_array_equal(batch["tokens"], expected["tokens"][rows])
            np.testing.assert_array_equal(batch["loss_mask"], expected["loss_mask"][rows])


# -- torch ------------------------------------------------------------------------------

@pytest.mark.parametrize("num_workers", [0, 1])
def test_torch_dataloader_with_a_batch_sampler(train, expected, num_workers):
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    from torch.utils.data import DataLoader

    sampler = mdc.samplers.PretrainingSampler(len(train), 0, BATCH, 0, 1)
    # workers from a fork server: another test in this process may have started JAX's
    # threads, and forking a multithreaded process can deadlock
    context = {"multiprocessing_context": "forkserver"} if num_workers else {}
    data = DataLoader(torch_data.TorchDataset(train), batch_sampler=sampler,
                      num_workers=num_workers, **context)
    batches = list(data)
    assert len(batches) == len(train) // BATCH
    got = np.concatenate([batch["loss_mask"].numpy() for batch in batches])
    np.testing.assert_array_equal(got, expected["loss_mask"][: len(got)])
    np.testing.assert_array_equal(
        np.concatenate([batch["tokens"].numpy() for batch in batches]),
        expected["tokens"][: len(got)])


# -- the Megatron drop-in ---------------------------------------------------------------

class Tokenizer:
    """What Megatron's datasets read from a tokenizer (no pad token: Megatron's -1)."""

    eod = 0
    vocab_size = 65536
    unique_identifiers = {"class": "Tokenizer", "eod": 0, "vocab_size": 65536}


def megatron_build(blend, sizes, **fields):
    pytest.importorskip("torch")
    from megadata_adapters.trainers.megatron_datasets import gpt_dataset
    from megadata_adapters.trainers.megatron_datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )

    config = gpt_dataset.GPTDatasetConfig(
        tokenizer=Tokenizer(), random_seed=7, sequence_length=SEQ, blend=blend, split="1,0,0",
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
        create_attention_mask=False, **fields)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BlendedMegatronDatasetBuilder(gpt_dataset.GPTDataset, sizes, lambda: True,
                                             config).build()[0]


def _samples(dataset) -> dict[str, np.ndarray]:
    samples = [dataset[i] for i in range(len(dataset))]
    return {key: np.stack([s[key].numpy() for s in samples])
            for key in ("tokens", "labels", "loss_mask")}


def test_megatron_drop_in_blend_serves_the_cores_loss_mask(corpora):
    blended = megatron_build(([corpora.chat, corpora.plain], [0.5, 0.5]), [SAMPLES, 0, 0])
    got = _samples(blended)
    check_against_roles(corpora, got["tokens"], got["labels"], got["loss_mask"])
    for index in range(len(blended)):  # the member's core sample, value for value
        member = blended.datasets[int(blended.dataset_index[index])]
        core = member.core[int(blended.dataset_sample_index[index])]
        np.testing.assert_array_equal(got["loss_mask"][index], core["loss_mask"])
    assert [member.core.has_roles for member in blended.datasets] == [True, False]


@pytest.mark.parametrize("switches", [{}, {"train_on_tool_calls": True},
                                      {"train_on_assistant_responses_only": False}],
                         ids=["default", "tool-calls", "all-but-tool"])
def test_megatron_drop_in_one_conversation_corpus(corpora, switches):
    """One uint16 corpus with Megatron's pad (-1, outside the dtype): the drop-in's
    one-sample read, which serves a plain corpus an all-ones mask, must not serve it to a
    conversation corpus; the switches are the drop-in config's too."""
    dataset = megatron_build(([corpora.chat], None), [None, 0, 0], **switches)
    got = _samples(dataset)
    roles = trained_roles(switches.get("train_on_assistant_responses_only", True),
                          False, switches.get("train_on_tool_calls", False))
    np.testing.assert_array_equal(got["loss_mask"] != 0,
                                  corpora.expected_mask(got["tokens"], got["labels"], roles))
    np.testing.assert_array_equal(
        got["loss_mask"], dataset.core.__getitems__(np.arange(len(dataset)))["loss_mask"])
    assert (got["loss_mask"] == 0).any()


# -- MaxText's keys and its data config source -----------------------------------------

def test_maxtext_keys_zero_targets_segmentation_where_loss_mask_is(corpora, train, expected):
    keyed = mx_keys.to_maxtext(expected)
    np.testing.assert_array_equal(keyed["targets_segmentation"] != 0, expected["loss_mask"] != 0)
    check_against_roles(corpora, keyed["inputs"], keyed["targets"],
                        keyed["targets_segmentation"])
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    source = grain_source.GrainSource(train, key_names="maxtext")
    np.testing.assert_array_equal(
        source.__getitems__(range(len(train)))["targets_segmentation"],
        keyed["targets_segmentation"])


def test_maxtext_data_config_source_with_switches(corpora, tmp_path):
    from megadata_adapters.trainers.maxtext.source import ConfiguredSource

    path = corpora.write_json(str(tmp_path / "data.json"), train_on_thinking_traces=True)
    config, extras = mx_keys.data_config(path, SEQ, 0, 7)
    assert config.train_on_thinking_traces and config.trained_roles_mode.roles == (
        Role.ASSISTANT, Role.END_OF_TURN, Role.REASONING)
    source = ConfiguredSource(config, SAMPLES, 0, extras)
    samples = [source[index] for index in range(len(source))]  # as Grain reads it
    batch = {key: np.stack([sample[key] for sample in samples]) for key in samples[0]}
    roles = trained_roles(thinking=True)
    check_against_roles(corpora, batch["inputs"], batch["targets"],
                        batch["targets_segmentation"], roles)
    core = source.dataset.__getitems__(np.arange(len(source)))
    np.testing.assert_array_equal(batch["targets_segmentation"] != 0, core["loss_mask"] != 0)



def test_maxtexts_own_file_types_warn_that_they_train_every_label(corpora, tmp_path, caplog):
    """grain_file_type mmap_npy / mmap serve MaxText text (MaxText makes the masks): a
    conversation corpus named there is read as stock MaxText reads it, with a warning
    naming it and the data config that serves its roles' mask."""
    from megadata_adapters.trainers.maxtext import source as mx_source

    def plan(prefixes):
        members = [(str(tmp_path / f"index{k}"), p, 40) for k, p in enumerate(prefixes)]
        weights = None if len(prefixes) == 1 else [0.5] * len(prefixes)
        return mx_source.MmapNpyPlan(
            members, weights, None if weights is None else 80, seq_length=SEQ, eod_id=0,
            seed=7, split=None, split_index=0, num_epoch=1, path_to_cache=str(tmp_path / "c"))

    with caplog.at_level("WARNING", logger="megadata_adapters.trainers.maxtext"):
        mx_source.MegadataNpySource(plan([corpora.plain]))
        assert not caplog.records
        source = mx_source.MegadataNpySource(plan([corpora.chat, corpora.plain]))
    (record,) = caplog.records
    assert corpora.chat in record.getMessage() and "grain_train_files: data.json" in \
        record.getMessage() and "mmap_npy" in record.getMessage()
    assert source[0]["text"].shape == (SEQ + 1,)  # the text, as MaxText's source gives it
    assert mx_source.warn_conversations([corpora.plain, corpora.chat], "mmap") == [corpora.chat]


# -- the JSON data config ---------------------------------------------------------------

SWITCHES = {"train_on_assistant_responses_only": True, "train_on_thinking_traces": True,
            "train_on_tool_calls": True}


def test_data_json_takes_the_three_switches(corpora, tmp_path):
    path = corpora.write_json(str(tmp_path / "data.json"), **SWITCHES)
    assert {k: v for k, v in data_json.read_data_json(path, "setting").items()
            if k in SWITCHES} == SWITCHES
    expected_roles = (Role.ASSISTANT, Role.END_OF_TURN, Role.REASONING, Role.TOOL_CALL)
    maxtext_config, _ = mx_keys.data_config(path, SEQ, 0, 7)
    assert maxtext_config.trained_roles_mode.roles == expected_roles
    # the switches reach the samples: tool calls and reasoning now train
    batch = core_train(corpora, **SWITCHES).__getitems__(np.arange(SAMPLES))
    check_against_roles(corpora, batch["tokens"], batch["labels"], batch["loss_mask"],
                        trained_roles(True, True, True))


@pytest.mark.parametrize("field", sorted(SWITCHES))
def test_a_switch_that_is_no_bool_is_refused_from_json(corpora, tmp_path, field):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"blend": [[corpora.chat], None], field: "yes"}))
    with pytest.raises(mdc.DataError, match=field):
        mx_keys.data_config(str(path), SEQ, 0, 7)
