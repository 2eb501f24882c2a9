"""Samples of conversation corpora: which labels train (a roles sibling beside the tokens).

Every corpus here is written with ``mdc.IndexedDatasetWriter`` (tokens, int32) and a
second writer of dtype uint8 (one Role code per token, ``PREFIX_roles``). Tokens are
``1 + their position in the corpus`` (pads become 0), so a sample's token and label name
their corpus positions: the oracle looks their conversation and role up directly.
"""

from __future__ import annotations

import os
import pickle
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.format.roles import Role
from megadata_core.modes.trained_roles import TrainedRoles

T, SY, U, A, E, R, TC, TO = (int(role) for role in Role)
SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def write_chat(prefix: str, conversations, *, roles_dtype=np.uint8) -> str:
    """One document (one sequence) per conversation: tokens 1 + corpus position, roles
    the given codes."""
    position = 1
    with mdc.IndexedDatasetWriter(prefix, dtype=np.int32) as tokens, \
            mdc.IndexedDatasetWriter(prefix + "_roles", dtype=roles_dtype) as roles:
        for codes in conversations:
            count = len(codes)
            tokens.add_document(np.arange(position, position + count), [count])
            roles.add_document(np.asarray(codes, dtype=roles_dtype), [count])
            position += count
    return prefix


def write_plain(prefix: str, lengths) -> str:
    position = 1
    with mdc.IndexedDatasetWriter(prefix, dtype=np.int32) as tokens:
        for count in lengths:
            tokens.add_document(np.arange(position, position + count), [count])
            position += count
    return prefix


def _dataset(prefix: str, **options) -> mdc.GPTDataset:
    indexed = mdc.IndexedDataset(prefix)
    config = mdc.GPTDataConfig(random_seed=3, **options)
    return mdc.GPTDataset(indexed, np.arange(len(indexed)), None, config)


def _all(dataset) -> dict[str, np.ndarray]:
    return dataset.__getitems__(np.arange(len(dataset)))


def _by_first_token(batch) -> dict[int, list[float]]:
    return {int(row[0]): mask.tolist() for row, mask in zip(batch["tokens"], batch["loss_mask"])}


# -- hand-built corpora, the exact loss masks written out -------------------------------

#  token:  1  2  3  4  5  6  7 |  8  9 10 11 12 13 14
#  role:   T  U  U  T  A  A  E |  T SY  T  U  T  A  E
CHATS = [[T, U, U, T, A, A, E], [T, SY, T, U, T, A, E]]


def test_the_label_of_a_position_is_the_next_token_and_its_role_decides(tmp_path):
    """loss_mask[t] is about predicting labels[t] = token t + 1: the position before the
    only assistant token trains, the assistant token itself (whose label is the
    template) does not."""
    prefix = write_chat(str(tmp_path / "one"), [[T, U, A, T, T]])
    batch = _all(_dataset(prefix, sequence_length=4))
    assert batch["tokens"].tolist() == [[1, 2, 3, 4]]
    assert batch["labels"].tolist() == [[2, 3, 4, 5]]
    assert batch["loss_mask"].tolist() == [[0, 1, 0, 0]]  # label 3 is the ASSISTANT token


#: The two concat samples of S = 6 of CHATS, by the order the shuffle puts the
#: conversations in (first token of each sample: its loss mask).
CONCAT = {
    # 1 2 3 4 5 6 | 7 8 .. 12: labels 2..7 (U U T A A E), then 8 starts the next
    # conversation (never trained), SY T U T A
    1: {1: [0, 0, 0, 1, 1, 1], 7: [0, 0, 0, 0, 0, 1]},
    # 8 .. 13 | 14 1 2 3 4 5: labels 9..14 (SY T U T A E), then 1 starts the next
    # conversation, U U T A A
    8: {8: [0, 0, 0, 0, 1, 1], 14: [0, 0, 0, 0, 1, 1]},
}


def test_concat_masks_are_written_out(tmp_path):
    prefix = write_chat(str(tmp_path / "chat"), CHATS)
    dataset = _dataset(prefix, sequence_length=6)
    batch = _all(dataset)
    first = int(dataset.document_index[0]) * 7 + 1  # the first conversation's first token
    assert _by_first_token(batch) == CONCAT[first]


def test_concat_with_document_masking_is_written_out(tmp_path):
    prefix = write_chat(str(tmp_path / "chat"), CHATS)
    dataset = _dataset(prefix, sequence_length=6, document_masking=True)
    batch = _all(dataset)
    first = int(dataset.document_index[0]) * 7 + 1
    assert _by_first_token(batch) == CONCAT[first]
    second = batch["tokens"][:, 0] == (7 if first == 1 else 14)
    assert batch["cu_seqlens"][second, :3].tolist() == [[0, 1, 6]]


def test_best_fit_masks_are_written_out(tmp_path):
    prefix = write_chat(str(tmp_path / "chat"), CHATS)
    batch = _all(_dataset(prefix, sequence_length=8, packing="best_fit",
                          document_masking=True))
    assert _by_first_token(batch) == {
        1: [0, 0, 0, 1, 1, 1, 0, 0],  # labels 2..7, then padding
        8: [0, 0, 0, 0, 1, 1, 0, 0],  # labels 9..14: SY T U T A E
    }


def test_best_fit_packs_two_conversations_and_trains_no_label_between_them(tmp_path):
    prefix = write_chat(str(tmp_path / "pair"), [[T, A, E], [T, A, A, E]])
    batch = _all(_dataset(prefix, sequence_length=7, packing="best_fit"))
    assert len(batch["tokens"]) == 1
    tokens, mask = batch["tokens"][0].tolist(), batch["loss_mask"][0].tolist()
    if tokens[0] == 1:  # [1 2 3 | 4 5 6 7] labels 2 3 (4) 5 6 7 (pad)
        assert tokens == [1, 2, 3, 4, 5, 6, 7] and mask == [1, 1, 0, 1, 1, 1, 0]
    else:  # [4 5 6 7 | 1 2 3] labels 5 6 7 (1) 2 3 (pad)
        assert tokens == [4, 5, 6, 7, 1, 2, 3] and mask == [1, 1, 1, 0, 1, 1, 0]


def test_eod_mask_loss_and_roles_both_apply(tmp_path):
    #        1  2  3  4  5  6  7  8
    chat = [[T, U, T, A, E, A, A, E]]
    prefix = write_chat(str(tmp_path / "eod"), chat)
    plain = _all(_dataset(prefix, sequence_length=7))["loss_mask"].tolist()
    assert plain == [[0, 0, 1, 1, 1, 1, 1]]  # labels 2..8: U T A E A A E
    masked = _all(_dataset(prefix, sequence_length=7, eod_id=5, eod_mask_loss=True))
    assert masked["loss_mask"].tolist() == [[0, 0, 1, 1, 0, 1, 1]]  # input 5 is the EOD


def test_a_long_conversation_in_best_fit_is_cut_into_whole_samples(tmp_path):
    """best_fit cuts a document longer than a sample into samples of S + 1 tokens and a
    remainder that is packed like a document; the label pair across a cut trains in no
    sample (the cut's first token is an input, never a label)."""
    roles = [T, A, A, A, A, A, A, A, A, A, A, E]  # 12 tokens, S = 4: capacity 5
    prefix = write_chat(str(tmp_path / "long"), [roles])
    batch = _all(_dataset(prefix, sequence_length=4, packing="best_fit"))
    assert _by_first_token(batch) == {
        1: [1, 1, 1, 1],   # labels 2..5
        6: [1, 1, 1, 1],   # labels 7..10 (the pair 5 -> 6 is in no sample)
        11: [1, 0, 0, 0],  # labels 12, then padding
    }


SWITCHES = {
    # (assistant only, thinking, tool calls): the roles whose labels train
    (True, False, False): {A, E},
    (True, True, False): {A, E, R},
    (True, False, True): {A, E, TC},
    (True, True, True): {A, E, R, TC},
    (False, False, False): {T, SY, U, A, E, R, TC},
    (False, True, True): {T, SY, U, A, E, R, TC},
}


@pytest.mark.parametrize("switches", sorted(SWITCHES))
def test_each_switch_trains_its_roles(tmp_path, switches):
    every = [T, SY, T, U, T, R, TC, T, TO, T, A, E]  # every role once after the first token
    prefix = write_chat(str(tmp_path / "every"), [every])
    only, thinking, tools = switches
    batch = _all(_dataset(prefix, sequence_length=11,
                          train_on_assistant_responses_only=only,
                          train_on_thinking_traces=thinking, train_on_tool_calls=tools))
    expected = [float(role in SWITCHES[switches]) for role in every[1:]]
    assert batch["loss_mask"].tolist() == [expected]


def test_trained_roles_is_one_object_of_the_config():
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8, train_on_tool_calls=True)
    mode = config.trained_roles_mode
    assert isinstance(mode, TrainedRoles)
    assert mode.roles == (Role.ASSISTANT, Role.END_OF_TURN, Role.TOOL_CALL)
    assert mode.describe()["trained_roles"] == ["ASSISTANT", "END_OF_TURN", "TOOL_CALL"]
    assert not mode.table.flags.writeable
    assert mode == TrainedRoles(True, False, True) != TrainedRoles()
    for field in ("train_on_assistant_responses_only", "train_on_thinking_traces",
                  "train_on_tool_calls"):
        with pytest.raises(mdc.DataError, match=field):
            mdc.GPTDataConfig(random_seed=1, sequence_length=8, **{field: "yes"})


def test_the_switches_change_no_index_key(tmp_path):
    prefix = write_chat(str(tmp_path / "chat"), CHATS)
    default = _dataset(prefix, sequence_length=6)
    other = _dataset(prefix, sequence_length=6, train_on_assistant_responses_only=False)
    assert default.description() == other.description()
    np.testing.assert_array_equal(_all(default)["tokens"], _all(other)["tokens"])


# -- property: trained positions are exactly the oracle's ------------------------------

CONVERSATIONS = st.lists(
    st.lists(st.integers(0, len(Role) - 1), min_size=1, max_size=14), min_size=1, max_size=12
)
LAYOUTS = st.sampled_from([
    {"packing": "concat"},
    {"packing": "concat", "document_masking": True},
    {"packing": "concat", "add_extra_token_to_sequence": False},
    {"packing": "best_fit"},
    {"packing": "best_fit", "document_masking": True},
    {"packing": "best_fit", "document_masking": True, "packing_alignment": 2},
])


def _oracle(conversations, batch, only, thinking, tools, eod=None) -> np.ndarray:
    """bool [B, S]: the label is a real token of the input's conversation, right after
    it, and of a role the switches train (and the input is not ``eod``)."""
    roles = np.concatenate([np.asarray(codes) for codes in conversations])
    ends = np.cumsum([len(codes) for codes in conversations])
    trained_roles = ({A, E} | ({R} if thinking else set()) | ({TC} if tools else set())
                     if only else set(range(len(Role))) - {TO})
    tokens = batch["tokens"].astype(np.int64)
    labels = batch["labels"].astype(np.int64)
    real = (tokens > 0) & (labels > 0)
    at_token, at_label = np.maximum(tokens - 1, 0), np.maximum(labels - 1, 0)
    same = np.searchsorted(ends, at_token, "right") == np.searchsorted(ends, at_label, "right")
    role_trains = np.isin(roles[at_label], sorted(trained_roles))
    return real & same & (labels == tokens + 1) & role_trains & (tokens != eod)


@SETTINGS
@given(conversations=CONVERSATIONS, layout=LAYOUTS, length=st.sampled_from([2, 4, 6, 10]),
       switches=st.tuples(st.booleans(), st.booleans(), st.booleans()), seed=st.integers(0, 9),
       eod=st.none() | st.integers(1, 20))
def test_trained_positions_are_the_oracles(tmp_path_factory, conversations, layout, length,
                                          switches, seed, eod):
    prefix = write_chat(str(tmp_path_factory.mktemp("chat") / "chat"), conversations)
    only, thinking, tools = switches
    indexed = mdc.IndexedDataset(prefix)
    config = mdc.GPTDataConfig(
        random_seed=seed, sequence_length=length, train_on_assistant_responses_only=only,
        train_on_thinking_traces=thinking, train_on_tool_calls=tools,
        eod_id=eod, eod_mask_loss=eod is not None, **layout)
    dataset = mdc.GPTDataset(indexed, np.arange(len(indexed)), 3 * len(conversations), config)
    batch = _all(dataset)
    expected = _oracle(conversations, batch, only, thinking, tools, eod)
    np.testing.assert_array_equal(batch["loss_mask"] > 0, expected)
    assert set(np.unique(batch["loss_mask"]).tolist()) <= {0.0, 1.0}


# -- blends with a plain pretraining corpus ---------------------------------------------

def _blend(prefixes, **options):
    config = mdc.GPTDataConfig(random_seed=7, sequence_length=8, blend=(prefixes, [0.5, 0.5]),
                               split="1,0,0", source_ids=True, **options)
    return mdc.build_datasets(config, [40, None, None])[0]


@pytest.mark.parametrize("layout", [{}, {"packing": "best_fit", "document_masking": True}],
                         ids=["concat", "best_fit"])
def test_a_blend_keeps_the_plain_members_masks(tmp_path, layout):
    rng = np.random.default_rng(0)
    chats = [rng.integers(0, len(Role), rng.integers(3, 15)).tolist() for _ in range(30)]
    chat = write_chat(str(tmp_path / "chat"), chats)
    plain = write_plain(str(tmp_path / "plain"), rng.integers(2, 20, 40))
    bare = str(tmp_path / "bare")  # the same tokens without roles
    for suffix in (".bin", ".idx"):
        shutil.copyfile(chat + suffix, bare + suffix)
    mixed, without = _blend([chat, plain], **layout), _blend([bare, plain], **layout)
    batch, reference = _all(mixed), _all(without)
    np.testing.assert_array_equal(batch["tokens"], reference["tokens"])
    np.testing.assert_array_equal(batch["dataset_ids"], reference["dataset_ids"])
    member = batch["dataset_ids"].max(axis=1)  # each row's member (-1 only on padding)
    plain_rows, chat_rows = member == 1, member == 0
    assert plain_rows.any() and chat_rows.any()
    np.testing.assert_array_equal(batch["loss_mask"][plain_rows],
                                  reference["loss_mask"][plain_rows])
    assert (batch["loss_mask"][chat_rows] <= reference["loss_mask"][chat_rows]).all()
    assert (batch["loss_mask"][chat_rows] < reference["loss_mask"][chat_rows]).any()
    expected = _oracle(chats, {key: batch[key][chat_rows] for key in ("tokens", "labels")},
                       True, False, False)
    np.testing.assert_array_equal(batch["loss_mask"][chat_rows] > 0, expected)


# -- refusals ---------------------------------------------------------------------------

def test_a_roles_corpus_of_another_dtype_is_refused(tmp_path):
    prefix = write_chat(str(tmp_path / "wide"), CHATS, roles_dtype=np.uint16)
    with pytest.raises(mdc.DataError, match=r"wide_roles\.idx.*dtype uint16"):
        _dataset(prefix, sequence_length=6)


def test_roles_of_other_lengths_are_refused(tmp_path):
    prefix = write_chat(str(tmp_path / "short"), CHATS)
    write_chat(str(tmp_path / "other"), [CHATS[0], CHATS[1][:-1]])
    for suffix in (".bin", ".idx"):
        os.replace(str(tmp_path / "other_roles") + suffix, prefix + "_roles" + suffix)
    with pytest.raises(mdc.DataError, match=r"short_roles\.idx.*sequence lengths.*entry 1"):
        _dataset(prefix, sequence_length=6)


def test_roles_of_other_document_boundaries_are_refused(tmp_path):
    prefix = write_chat(str(tmp_path / "bounds"), CHATS)
    with mdc.IndexedDatasetWriter(prefix + "_roles", dtype=np.uint8) as roles:
        roles.add_document(np.concatenate(CHATS).astype(np.uint8), [7, 7])  # one document
    with pytest.raises(mdc.DataError, match=r"bounds_roles\.idx.*document boundaries"):
        _dataset(prefix, sequence_length=6)


def test_a_code_that_is_no_role_is_refused(tmp_path):
    prefix = write_chat(str(tmp_path / "codes"), [CHATS[0], [T, A, 9, E]])
    dataset = _dataset(prefix, sequence_length=4)
    with pytest.raises(mdc.DataError, match=r"codes_roles\.bin.*role code 9"):
        _all(dataset)


def test_a_pickled_dataset_opens_its_roles_again(tmp_path):
    prefix = write_chat(str(tmp_path / "chat"), CHATS)
    dataset = _dataset(prefix, sequence_length=6)
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.has_roles
    np.testing.assert_array_equal(_all(copy)["loss_mask"], _all(dataset)["loss_mask"])


# -- through the adapters ---------------------------------------------------------------

def test_loss_mask_flows_through_torch_and_grain(tmp_path):
    prefix = write_chat(str(tmp_path / "chat"), CHATS)
    dataset = _dataset(prefix, sequence_length=6)
    expected = _all(dataset)["loss_mask"]
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    tensors = torch_data.TorchDataset(dataset)
    np.testing.assert_array_equal(tensors[1]["loss_mask"].numpy(), expected[1])
    sampler = mdc.samplers.PretrainingSampler(len(dataset), 0, 2, 0, 1)
    batch = next(iter(torch_data.loader(tensors, sampler, num_workers=0)))
    np.testing.assert_array_equal(batch["loss_mask"].numpy(), expected)
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    source = grain_source.GrainSource(dataset)
    np.testing.assert_array_equal(source.__getitems__([0, 1])["loss_mask"], expected)
    np.testing.assert_array_equal(source[1]["loss_mask"], expected[1])
