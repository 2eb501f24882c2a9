#!/usr/bin/env bash
# Set up a virtual environment from scratch and run the whole test suite.
#   bash tools/test.sh [--explore] [extra pytest arguments]
# Hypothesis runs derandomized (the same examples on every machine: CI's mode). With
# --explore it runs with random seeds and MEGADATA_EXPLORE_FACTOR (default 5) times the
# examples; turn each counterexample it prints into an explicit @example.
# Environment: MEGADATA_VENV (default .venv), PYTHON (default python3.11).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export MEGADATA_HYPOTHESIS=ci
if [ "${1:-}" = "--explore" ]; then
    MEGADATA_HYPOTHESIS=explore
    shift
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
VENV=${MEGADATA_VENV:-.venv}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
# torch first, exactly this CPU build: the extras' range is then already met and no
# multi-GB CUDA wheels are pulled.
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" -e ".[all]"

"$VENV/bin/ruff" check .

export XLA_FLAGS=--xla_force_host_platform_device_count=8

# The framework adapters' tests run in a pytest of their own: once JAX has started its
# threads in a process, forking it (worker pools, DataLoader workers) can deadlock.
run_pytest() {
    set +e
    "$VENV/bin/python" -m pytest -n 2 -p no:cacheprovider "$@"
    local status=$?
    set -e
    if [ "$status" -eq 5 ]; then
        echo "pytest collected no tests: treating as failure" >&2
        return 1
    fi
    return "$status"
}

# The Megatron drop-in is also tested against the newest megatron-core it serves (0.19.2;
# it declares Python >= 3.12 but runs on 3.11): installed beside the venv, put ahead of
# its megatron-core 0.16.1 on PYTHONPATH, with the CPU import shim of cpu_site/.
MEGATRON_NEXT=${MEGADATA_MEGATRON_NEXT:-.megatron-core-0.19.2}
[ -d "$MEGATRON_NEXT/megatron" ] || "${PIP[@]}" --target "$MEGATRON_NEXT" --no-deps \
    --ignore-requires-python megatron-core==0.19.2

status=0
run_pytest --ignore=tests/adapters "$@" || status=1
run_pytest tests/adapters "$@" || status=1
PYTHONPATH="$MEGATRON_NEXT:tests/megatron_compat/cpu_site" run_pytest tests/megatron_compat \
    "$@" || status=1
exit "$status"
