"""A blend schedule edited mid-run, through Grain and a torch loader: the state saved on
the old schedule resumes the edited one at the same sample (other worker counts and
micro-batch sizes), the continuation is the edited schedule's own; a state whose past
the edit would change is refused, as is an edit under a shuffling sampler."""

from __future__ import annotations

import numpy as np
import pytest
from adapter_helpers import deadline, write_corpus

import megadata_core as mdc
from megadata_core.samplers import PretrainingSampler, RandomSampler

SEQ = 16
EDIT = 24  # samples read before the edit: 6 micro-batches of 4


@pytest.fixture(scope="module")
def schedules(tmp_path_factory):
    """(old, edited, rewritten): the old schedule; an edit at EDIT that anneals on a new
    corpus; one that changes a stage before EDIT."""
    root = tmp_path_factory.mktemp("schedule_resume")
    web, code, math = (write_corpus(str(root / name), seed=20 + i)
                       for i, name in enumerate(["web", "code", "math"]))

    def build(stages):
        config = mdc.GPTDataConfig(
            random_seed=3, sequence_length=SEQ, split="100,0,0", blend_schedule=stages,
            path_to_cache=str(root / "cache"), eod_id=3, pad_id=0,
        )
        return mdc.build_datasets(config, [80, 0, 0])[0]

    base = [(0, f"0.7 {web} 0.3 {code}"), (16, f"0.5 {web} 0.5 {code}")]
    return (
        build(base),
        build(base + [(EDIT, f"0.2 {web} 0.2 {code} 0.6 {math}")]),
        build([(0, f"0.7 {web} 0.3 {code}"), (16, f"0.4 {web} 0.6 {code}"),
               (EDIT, f"1 {math}")]),
    )


def rows(batches: list[dict]) -> np.ndarray:
    """Every sample's tokens, in order, from micro-batches of any size."""
    return np.concatenate([np.asarray(batch["tokens"]) for batch in batches])


@deadline(120)
def test_grain_state_resumes_the_edited_schedule(schedules):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    old, edited, rewritten = schedules
    make = grain_source.batched_dataset
    it = iter(make(old, micro_batch_size=4, worker_count=2))
    try:
        before = [next(it) for _ in range(EDIT // 4)]
        state = it.get_state()
    finally:
        it.close()
    assert state["consumed_samples"] == EDIT and "blend_schedule" in state
    want = edited.__getitems__(np.arange(len(edited)))["tokens"]
    np.testing.assert_array_equal(rows(before), want[:EDIT])
    resumed = iter(make(edited, micro_batch_size=2, worker_count=0))
    resumed.set_state(state)
    try:
        after = list(resumed)
        np.testing.assert_array_equal(rows(after), want[EDIT:])
        # the state now carries the edited schedule: a later restart reproduces it
        assert resumed.get_state()["blend_schedule"] == edited.resume_record()
    finally:
        resumed.close()
    refused = iter(make(rewritten, micro_batch_size=4))
    with pytest.raises(mdc.DataError, match="differ before the 24 samples already read"):
        refused.set_state(state)
    refused.close()


@deadline(120)
def test_torch_state_resumes_the_edited_schedule(schedules):
    pytest.importorskip("torch")
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    old, edited, rewritten = schedules
    context = {"multiprocessing_context": "forkserver"}
    loader = torch_data.StatefulLoader(old, PretrainingSampler(len(old), 0, 4, 0, 1),
                                       num_workers=2, **context)
    with loader:
        for step, _ in enumerate(loader):
            if step + 1 == EDIT // 4:
                state = loader.state_dict()
                break
    want = edited.__getitems__(np.arange(len(edited)))["tokens"]
    # resumed on rank 0 of 2 with micro-batches of 2: the global sequence continues
    resumed = torch_data.StatefulLoader(edited, PretrainingSampler(len(edited), 0, 2, 0, 2))
    resumed.load_state_dict(state)
    with resumed:
        got = [batch["tokens"].numpy() for batch in resumed]
    expected = [want[start : start + 2] for start in range(EDIT, len(edited) - 3, 4)]
    assert len(got) == len(expected)
    for g, w in zip(got, expected):
        np.testing.assert_array_equal(g, w)
    refused = torch_data.StatefulLoader(rewritten, PretrainingSampler(len(rewritten), 0, 4, 0, 1))
    with refused, pytest.raises(mdc.DataError, match="differ before the 24 samples"):
        refused.load_state_dict(state)
    shuffled = torch_data.StatefulLoader(
        edited, RandomSampler(len(edited), 0, 4, 0, 1, seed=1)
    )
    with shuffled, pytest.raises(mdc.DataError, match="this reader shuffles the blend"):
        shuffled.load_state_dict(state)
