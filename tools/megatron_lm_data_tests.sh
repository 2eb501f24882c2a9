#!/usr/bin/env bash
# Megatron-LM's own data tests (its tests/unit_tests/data) through the megatron.core.datasets
# drop-in, on CPU, from a checkout of Megatron-LM:
#   bash tools/megatron_lm_data_tests.sh CHECKOUT [pytest arguments]
# CHECKOUT: Megatron-LM at tag core_v0.16.1 or core_v0.19.0 (its megatron/ is imported from
# there). The Python is .venv's (the test command's setup: torch, megatron-core, nltk).
# tests/megatron_compat/megatron_lm/cpu_harness.py stands in for CUDA and NCCL (a gloo group
# of one rank) and fails the run unless the drop-in served megatron.core.datasets.
# Some tests read their CI's assets from fixed paths; where they are missing they fail alike
# on both sides: GPT-2's vocab.json and merges.txt at /opt/data/tokenizers/megatron/
# gpt2-vocab.json and gpt2-merges.txt (test_preprocess_data) and /home/gitlab-runner/data/
# gpt3_data/ (test_bin_reader), `gpt2` in the Hugging Face cache (HF_HUB_OFFLINE defaults to 1
# here: no hub requests), /opt/data/datasets/fim and /opt/data/tokenizers/huggingface
# (test_fim_dataset). test_preprocess_data_bert is left out: Megatron's CI deselects it
# (flaky, flaky_in_dev), and it cannot pass on megatron-core's own modules either (its pool's
# initializer loads bert-large-uncased from the hub and NLTK's punkt from an empty temporary
# directory, before any corpus is written; a failing initializer makes the pool start
# workers forever).
# test_preprocess_mmdata needs torchvision, not installed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHECKOUT="$(cd "${1:?usage: $0 MEGATRON_LM_CHECKOUT [pytest arguments]}" && pwd)"
shift
PYTHON=${PYTHON:-$HERE/${MEGADATA_VENV:-.venv}/bin/python}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
export PYTHONPATH="$CHECKOUT:$HERE/tests/megatron_compat/cpu_site:$HERE/tests/megatron_compat/megatron_lm${PYTHONPATH:+:$PYTHONPATH}"
cd "$CHECKOUT"
exec "$PYTHON" -m megadata_adapters.trainers.megatron_datasets -m pytest -p no:cacheprovider -p cpu_harness -o addopts="" -q -rfE \
    --ignore tests/unit_tests/data/test_preprocess_mmdata.py \
    --deselect tests/unit_tests/data/test_preprocess_data.py::test_preprocess_data_bert \
    "${@:-tests/unit_tests/data}"
