"""megadata's torchtitan 0.3 dataloader (``megadata_adapters.trainers.torchtitan``).

Runs where torchtitan imports (its own venv: ``.venv-torchtitan``, see
``tests/trainers/torchtitan_site/README.md``); skipped elsewhere. Checks: the loader built
through torchtitan's ``Config.build(...)`` dispatch, DP ranks disjoint and complete, the
state through torch.distributed.checkpoint (what torchtitan's checkpointer uses) giving
the same next batches (with and without workers), document masking as torchtitan 0.3's
attention reads it (``positions`` -> ``create_varlen_metadata_for_document`` equals
megadata's ``cu_seqlens``), the JSON data config, a conversation corpus's loss mask as
``labels`` -100.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _cpu_site() -> None:
    """The CPU harness's import hooks (``torchtitan_site/sitecustomize.py``): torchtitan's
    attention module imports its triton kernels' module, kept as a stand-in here."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "torchtitan_site", "sitecustomize.py")
    spec = importlib.util.spec_from_file_location("megadata_torchtitan_cpu_site", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


try:  # torchtitan's loader interface; it imports only in its own venv
    import torchtitan  # noqa: F401

    _cpu_site()
    from torchtitan.components.dataloader import BaseDataLoader
except Exception as error:  # noqa: BLE001 - ImportError, or a dependency's failure
    pytest.skip(f"torchtitan is not importable here ({error!r}); run this file with "
                ".venv-torchtitan", allow_module_level=True)

import torch.distributed.checkpoint as dcp  # noqa: E402
from gpt_oracle import write_corpus  # noqa: E402

from megadata_adapters.trainers import torchtitan as tt  # noqa: E402
from megadata_core.errors import DataError  # noqa: E402

SEQ = 32
EOD = 3


class Tokenizer:
    """What the loader reads from torchtitan's tokenizer: ``eos_id``, ``get_vocab_size``."""

    eos_id = EOD

    def get_vocab_size(self) -> int:
        return 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    rng = np.random.default_rng(11)
    directory = tmp_path_factory.mktemp("titan-corpus")
    return write_corpus(str(directory / "corpus"), rng.integers(1, 60, 400), rng, vocab=60)


def build(path: str, *, batch: int = 2, rank: int = 0, world: int = 1, **fields):
    config = tt.MegadataDataLoader.Config(dataset_path=path, **fields)
    return config.build(
        dp_world_size=world, dp_rank=rank, tokenizer=Tokenizer(), seq_len=SEQ,
        local_batch_size=batch, snapshot_every_n_steps=1,
    )


def take(loader, count: int) -> list:
    out, iterator = [], iter(loader)
    for _ in range(count):
        out.append(next(iterator))
    return out


def same(a, b) -> None:
    (inputs_a, labels_a), (inputs_b, labels_b) = a, b
    assert inputs_a.keys() == inputs_b.keys()
    for key in inputs_a:
        assert torch.equal(inputs_a[key], inputs_b[key]), key
    assert torch.equal(labels_a, labels_b)


def test_build_dispatch_and_batch_shape(corpus):
    loader = build(corpus, batch=3)
    assert isinstance(loader, BaseDataLoader) and isinstance(loader, tt.MegadataDataLoader)
    inputs, labels = next(iter(loader))
    assert set(inputs) == {"input", "positions"}
    assert inputs["input"].shape == labels.shape == inputs["positions"].shape == (3, SEQ)
    assert inputs["input"].dtype == labels.dtype == torch.long
    sample = loader.dataset[0]  # concat: labels are the next tokens, all trained on
    assert np.array_equal(inputs["input"][0].numpy(), sample["tokens"])
    assert np.array_equal(labels[0].numpy(), sample["labels"])
    assert np.array_equal(inputs["positions"][0].numpy(), np.arange(SEQ))


def test_dp_ranks_disjoint_and_complete(corpus):
    """Sequential: per step, the ranks' batches in rank order are the single-rank global
    batch: no sample twice, none left out."""
    world, batch, steps = 3, 2, 5
    whole = take(build(corpus, batch=world * batch), steps)
    ranks = [take(build(corpus, batch=batch, rank=r, world=world), steps)
             for r in range(world)]
    for step in range(steps):
        for key in ("input", "positions"):
            joined = torch.cat([ranks[r][step][0][key] for r in range(world)])
            assert torch.equal(joined, whole[step][0][key])
        assert torch.equal(torch.cat([ranks[r][step][1] for r in range(world)]), whole[step][1])
    seen = [tuple(map(tuple, b[0]["input"].tolist())) for r in ranks for b in r]
    assert len(set(seen)) == len(seen)  # distinct batches across ranks and steps


def test_random_sampler_ranks_cover_an_epoch_once(corpus):
    """Random: over one epoch the ranks' samples are disjoint and cover every sample of
    the epoch once; each batch is the dataset's samples at the sampler's indices."""
    world, batch = 2, 3
    loaders = [build(corpus, batch=batch, rank=r, world=world, sampler="random")
               for r in range(world)]
    epoch = loaders[0].sampler.active_total_samples
    steps = epoch // (world * batch)
    indices = []
    for loader in loaders:
        picked = [index for _, micro in zip(range(steps), iter(loader.sampler))
                  for index in micro]
        indices.append(picked)
    assert not set(indices[0]) & set(indices[1])
    assert sorted(indices[0] + indices[1]) == list(range(epoch))
    for rank, picked in enumerate(indices):
        loader = build(corpus, batch=batch, rank=rank, world=world, sampler="random")
        inputs, labels = take(loader, 2)[1]
        expected = loader.dataset.__getitems__(picked[batch:2 * batch])
        assert np.array_equal(inputs["input"].numpy(), expected["tokens"])
        assert np.array_equal(labels.numpy(), expected["labels"])


def test_sequential_order_is_megatrons(corpus):
    world, batch = 2, 2
    loader = build(corpus, batch=batch, rank=1, world=world)
    (inputs, labels), = take(loader, 1)
    expected = loader.dataset.__getitems__([2, 3])  # step 0, rank 1: samples [r*mbs, (r+1)*mbs)
    assert np.array_equal(inputs["input"].numpy(), expected["tokens"])
    assert np.array_equal(labels.numpy(), expected["labels"])


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("fields", [{}, {"sampler": "random"},
                                    {"packing": "best_fit", "document_masking": True}])
def test_dcp_round_trip_gives_the_next_batches(corpus, tmp_path, workers, fields):
    """Save after k batches with DCP (torchtitan's checkpointer saves the loader as a
    Stateful under ``dataloader``), load into a fresh loader: the same next batches."""
    first = build(corpus, num_workers=workers, **fields)
    iterator = iter(first)
    for _ in range(4):
        next(iterator)
    dcp.save({"dataloader": first}, checkpoint_id=str(tmp_path / "step-4"))
    following = [next(iterator) for _ in range(3)]
    first.close()

    again = build(corpus, num_workers=workers, **fields)
    assert again.state_dict() != first.state_dict()
    dcp.load({"dataloader": again}, checkpoint_id=str(tmp_path / "step-4"))
    for got, want in zip(take(again, 3), following):
        same(got, want)
    again.close()


def test_dcp_with_two_ranks_saves_one_state_and_resumes_each(corpus, tmp_path):
    """Two processes (gloo), each rank its own loader, as torchtitan runs them: DCP saves
    the rank-free state once, every rank loads it and continues with its own next
    batches; one process then resumes the two-rank checkpoint (same G = 4: elastic)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = os.path.join(os.path.dirname(__file__), "torchtitan_site", "dcp_ranks.py")
    checkpoint = str(tmp_path / "ckpt")
    runs = [
        subprocess.Popen(
            [sys.executable, script, corpus, checkpoint, str(tmp_path / f"rank{r}.json")],
            env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for r in range(2)
    ]
    for run in runs:
        output, _ = run.communicate(timeout=300)
        assert run.returncode == 0, output[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank in ranks:
        assert rank["resumed"] == rank["following"]
    assert ranks[0]["state"] == ranks[1]["state"]
    assert not set(ranks[0]["first"] + ranks[0]["following"]) & set(
        ranks[1]["first"] + ranks[1]["following"])
    metadata = dcp.FileSystemReader(checkpoint).read_metadata()
    assert [key for key in metadata.state_dict_metadata if "dataloader" in key] == [
        f"dataloader.{tt.STATE_KEY}"]

    one = build(corpus, batch=4, packing="best_fit", document_masking=True)
    dcp.load({"dataloader": one}, checkpoint_id=checkpoint)
    reference = take(build(corpus, batch=4, packing="best_fit", document_masking=True), 4)
    same(take(one, 1)[0], reference[3])


def test_state_is_rank_free_and_json(corpus):
    loader = build(corpus, batch=2, rank=1, world=2)
    take(loader, 2)
    state = loader.state_dict()
    assert list(state) == [tt.STATE_KEY]
    fields = json.loads(state[tt.STATE_KEY])
    assert fields["consumed_samples"] == 2 * 2 * 2
    assert build(corpus, batch=2, rank=0, world=2).state_dict().keys() == state.keys()


def test_resume_elastic_under_another_dp_size(corpus):
    """Same G (local_batch_size x dp_world_size), other DP size: the sequential sampler
    continues the same global stream."""
    two = [build(corpus, batch=2, rank=r, world=2) for r in range(2)]
    for loader in two:
        take(loader, 3)
    state = two[0].state_dict()
    assert state == two[1].state_dict()
    one = build(corpus, batch=4)
    one.load_state_dict(state)
    reference = build(corpus, batch=4)
    same(take(one, 1)[0], take(reference, 4)[3])


def test_state_of_other_data_is_refused(corpus):
    loader = build(corpus)
    take(loader, 2)
    other = build(corpus, seed=99)
    with pytest.raises(DataError, match="fingerprint"):
        other.load_state_dict(loader.state_dict())
    with pytest.raises(DataError, match="megadata"):
        other.load_state_dict({"dp_rank_0": b"", "world_size": 1})
    other.load_state_dict({})  # torchtitan's "nothing saved": no-op


def test_document_masking_as_torchtitan_reads_it(corpus):
    from torchtitan.models.common.attention import create_varlen_metadata_for_document

    loader = build(corpus, batch=4, packing="best_fit", document_masking=True,
                   document_keys=True)
    for inputs, labels in take(loader, 6):
        positions, cu = inputs["positions"], inputs["cu_seqlens"]
        segments, max_seqlen = inputs["segment_ids"], inputs["max_seqlen"]
        assert cu.shape == (4, SEQ + 1) and segments.shape == (4, SEQ)
        assert cu.dtype == segments.dtype == max_seqlen.dtype == torch.int32
        titan = create_varlen_metadata_for_document(positions)
        titan_cu = titan.cu_seq_q.tolist()
        starts = []
        for row in range(4):
            ours = sorted(set(cu[row].tolist()))  # Megatron's padded layout: S repeated
            assert ours[0] == 0 and ours[-1] == SEQ
            # positions restart exactly at megadata's boundaries
            assert (positions[row] == 0).nonzero().flatten().tolist() == ours[:-1]
            starts += [row * SEQ + s for s in ours[:-1]]
            lengths = np.diff(ours)
            assert int(max_seqlen[row]) == lengths.max()
            # segment ids: one per document, 0 on padding; the padding is never trained on
            seg = segments[row].numpy()
            real = seg > 0
            assert np.array_equal(np.flatnonzero(np.diff(seg)) + 1,
                                  np.array(ours[1:-1])[np.array(ours[1:-1]) < SEQ])
            assert (labels[row][~torch.from_numpy(real)] == tt.IGNORE_INDEX).all()
            assert (inputs["input"][row] >= 0).all()
        assert titan_cu == starts + [4 * SEQ]
        assert int(titan.max_q) == int(max_seqlen.max())
        # a document's last label inside a row (it would be the next document's first
        # token) is never trained on
        for row in range(4):
            ends = [e - 1 for e in sorted(set(cu[row].tolist()))[1:-1]]
            assert (labels[row][ends] == tt.IGNORE_INDEX).all()


def test_document_keys_need_document_masking(corpus):
    loader = build(corpus, document_keys=True)
    with pytest.raises(DataError, match="document_masking"):
        take(loader, 1)


def test_json_data_config(corpus, tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps({
        "blend": [[corpus], None], "split": "1,0,0", "random_seed": 1234,
        "packing": "best_fit", "document_masking": True, "train_samples": 40,
    }))
    from_json = build(str(path))
    from_prefix = build(corpus, packing="best_fit", document_masking=True, train_samples=40)
    assert len(from_json.dataset) == len(from_prefix.dataset) >= 40
    assert from_json.sampler.total_samples == from_prefix.sampler.total_samples == 40
    assert len(list(from_json)) == 20  # 40 samples, 2 a batch, then the data runs out
    for got, want in zip(take(from_json, 5), take(from_prefix, 5)):
        same(got, want)
    assert from_json.data_config.eod_id == EOD  # the tokenizer's eos_id

    with pytest.raises(DataError, match="packing"):
        build(str(path), packing="concat")
    path.write_text(json.dumps({  # Megatron's --data-path string as the blend
        "blend": f"1.0 {corpus}", "split": "1,0,0", "packing": "best_fit",
        "document_masking": True, "train_samples": 40,
    }))
    for got, want in zip(take(build(str(path)), 3), take(from_prefix, 3)):
        same(got, want)
    path.write_text(json.dumps({"blend": [[corpus], None], "split": "1,0,0",
                                "sequence_length": SEQ * 2}))
    with pytest.raises(DataError, match="seq_len"):
        build(str(path))
    path.write_text(json.dumps({"blend": [[corpus], None], "sequense_length": SEQ}))
    with pytest.raises(DataError, match="sequense_length"):
        build(str(path))



@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_conversation_labels_are_ignored_where_the_roles_do_not_train(tmp_path, packing):
    """A conversation corpus blended with a plain one, the switches in the JSON data
    config: ``labels`` are -100 exactly where megadata's loss mask is 0 (the roles that do
    not train, labels across conversations), the core's labels elsewhere."""
    from conversation_corpora import Corpora, trained_roles

    corpora = Corpora(str(tmp_path))
    path = corpora.write_json(str(tmp_path / "data.json"), train_on_tool_calls=True,
                              train_samples=40)
    loader = build(path, batch=4, packing=packing, document_masking=packing == "best_fit")
    assert loader.data_config.trained_roles_mode.roles == tuple(
        sorted(trained_roles(tools=True)))
    batches = list(loader)
    assert len(batches) == 10
    for step, (inputs, labels) in enumerate(batches):
        core = loader.dataset.__getitems__(np.arange(step * 4, (step + 1) * 4))
        want = np.where(core["loss_mask"] == 0, tt.IGNORE_INDEX, core["labels"])
        np.testing.assert_array_equal(labels.numpy(), want)
        assert labels.dtype == torch.long
        if packing == "concat":  # the oracle, from the roles themselves
            trains = corpora.expected_mask(inputs["input"].numpy(), core["labels"],
                                           trained_roles(tools=True))
            np.testing.assert_array_equal(labels.numpy() != tt.IGNORE_INDEX, trains)
    every = np.concatenate([labels.numpy() for _, labels in batches])
    assert (every == tt.IGNORE_INDEX).any() and (every != tt.IGNORE_INDEX).any()


def test_conversation_switches_from_the_config(tmp_path):
    """The Config's train_on_* fields (torchtitan's --dataloader.train-on-tool-calls) set
    what the JSON leaves out, and must agree with what it says."""
    from conversation_corpora import Corpora, trained_roles

    corpora = Corpora(str(tmp_path))
    plain_json = corpora.write_json(str(tmp_path / "data.json"), train_samples=8)
    loader = build(plain_json, train_on_tool_calls=True, train_on_thinking_traces=True)
    assert loader.data_config.trained_roles_mode.roles == tuple(
        sorted(trained_roles(thinking=True, tools=True)))
    assert build(plain_json).data_config.trained_roles_mode.roles == tuple(
        sorted(trained_roles()))
    with_switch = corpora.write_json(str(tmp_path / "switch.json"), train_samples=8,
                                     train_on_tool_calls=True)
    with pytest.raises(DataError, match="train_on_tool_calls"):
        build(with_switch, train_on_tool_calls=False)

def test_bad_paths(tmp_path):
    with pytest.raises(DataError, match="dataset_path"):
        build(str(tmp_path / "nothing"))
    with pytest.raises(DataError, match="dataset_path"):
        build("")


def test_mock_data_from_json(tmp_path):
    path = tmp_path / "mock.json"
    path.write_text(json.dumps({"mock": True, "train_samples": 16}))
    loader = build(str(path), batch=4)
    inputs, labels = next(iter(loader))
    assert inputs["input"].shape == (4, SEQ) and int(inputs["input"].max()) < 64
