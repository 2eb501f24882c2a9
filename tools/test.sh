#!/usr/bin/env bash
# Set up virtual environments from scratch and run every check, leg by leg:
#   bash tools/test.sh [--explore] [extra pytest arguments]
#
# Legs, in this order (each prints its wall time; a failed leg fails the run, after the
# others ran):
#   setup       .venv (Python 3.11): torch 2.13.0 CPU, then -e ".[all]"; megatron-core 0.19.2
#   lint        ruff
#   build       the wheel and the sdist (python -m build, into dist/), twine check --strict
#   wheel       tests/packaging against that wheel (MEGADATA_WHEEL): our three names alone,
#               every source file under its installed name, entry points, metadata
#   quickstart  tools/quickstart_installed.sh: the wheel installed in a fresh venv outside
#               the checkout, JSON lines to a JAX global array
#   3.11        the whole suite on 3.11: the core's tests, the adapters', the Megatron
#               drop-in's against megatron-core 0.19.2 (as before)
#   docs, typecheck   tools/docs.sh and tools/typecheck.sh
#   3.12, 3.13  every test that needs no torch (torch installs on 3.11 only here; megatron-core
#               needs it): .venv-3.12 / .venv-3.13 get -e ".[<the torch-free extras>,test-base]";
#               tests/megatron_compat is left out, and a test that imports torch or megatron
#               itself is skipped, with its reason (tests/packaging/torchless.py); property
#               tests run derandomized with a quarter of their generated examples
#               (MEGADATA_HYPOTHESIS_SCALE=0.25; 3.11 runs them all). Their venvs' dependencies
#               install in the background from the start, beside the 3.11 legs.
#               A Python not found is named in one line and its leg skipped.
#   maxtext     tests/trainers/test_maxtext.py with the real maxtext 0.2.5 (Python 3.12)
#   torchtitan  tests/trainers/test_torchtitan*.py with the real torchtitan 0.3.0 (3.11);
#               both venvs kept between runs in $MEGADATA_TRAINER_VENVS (default
#               ~/.cache/megadata/venvs): the first run installs them (~10 and ~6 min)
#
# Hypothesis runs derandomized (the same examples on every machine: CI's mode). With
# --explore it runs with random seeds and MEGADATA_EXPLORE_FACTOR (default 5) times the
# examples; turn each counterexample it prints into an explicit @example.
# Environment: MEGADATA_VENV (default .venv), PYTHON (default python3.11), MEGADATA_LEGS
# (default: every leg, in the order above; e.g. MEGADATA_LEGS="build wheel quickstart").
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
LEGS=${MEGADATA_LEGS:-lint build wheel quickstart 3.11 docs typecheck 3.12 3.13 maxtext torchtitan}
DIST=dist
START=$SECONDS

wants() { [[ " $LEGS " == *" $1 "* ]]; }

# pip's file:// indexes that hold only some packages print a warning per package: not news.
quiet_pip() {
    "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
# Nothing installed on 3.12/3.13 (nor by the quickstart) may pull torch: no release of it
# meets this constraint, so pip stops with an error instead of downloading CUDA builds.
NO_TORCH=$(mktemp "${TMPDIR:-/tmp}/megadata-no-torch.XXXXXX")
trap 'rm -f "$NO_TORCH"' EXIT
printf 'torch<0\n' > "$NO_TORCH"

export XLA_FLAGS=--xla_force_host_platform_device_count=8

# The framework adapters' tests run in a pytest of their own: once JAX has started its
# threads in a process, forking it (worker pools, DataLoader workers) can deadlock.
# run_pytest PYTHON_BIN ARGS...
run_pytest() {
    local python=$1
    shift
    set +e
    "$python" -m pytest -n 2 -p no:cacheprovider "$@"
    local status=$?
    set -e
    if [ "$status" -eq 5 ]; then
        echo "pytest collected no tests: treating as failure" >&2
        return 1
    fi
    return "$status"
}

status=0
TIMES=()
STARTED=()
# leg NAME FUNCTION: run FUNCTION in a subshell with errexit (any failing command fails
# the leg), print its wall time, remember a failure and go on with the next leg.
leg() {
    local name=$1 fn=$2 begin=$SECONDS rc verdict
    wants "$name" || return 0
    STARTED+=("$name")
    echo "=== leg $name"
    set +e
    ( set -euo pipefail; "$fn" )
    rc=$?
    set -e
    case $rc in
        0) verdict=passed;;
        77) verdict=skipped;;  # a Python version not found
        *) verdict="FAILED (exit $rc)"; status=1;;
    esac
    TIMES+=("$(printf '%-11s %-18s %4d s' "$name" "$verdict" $((SECONDS - begin)))")
    echo "=== leg $name: $verdict in $((SECONDS - begin)) s"
}

# -- 3.11: .venv with torch and megatron-core --------------------------------------------------
setup_311() {
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    local pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    # torch first, exactly this CPU build: the extras' range is then already met and no
    # multi-GB CUDA wheels are pulled.
    quiet_pip "${pip[@]}" torch==2.13.0
    quiet_pip "${pip[@]}" -e ".[all]"
    # The Megatron drop-in is also tested against the newest megatron-core it serves
    # (0.19.2; it declares Python >= 3.12 but runs on 3.11): installed beside the venv, put
    # ahead of its megatron-core 0.16.1 on PYTHONPATH, with the CPU import shim of cpu_site/.
    [ -d "$MEGATRON_NEXT/megatron" ] || quiet_pip "${pip[@]}" --target "$MEGATRON_NEXT" \
        --no-deps --ignore-requires-python megatron-core==0.19.2
}
MEGATRON_NEXT=${MEGADATA_MEGATRON_NEXT:-.megatron-core-0.19.2}

leg_lint() {
    "$VENV/bin/ruff" check .
}

leg_311() {
    local rc=0
    run_pytest "$VENV/bin/python" --ignore=tests/adapters --ignore=tests/packaging \
        --ignore=tests/trainers "${PYTEST_ARGS[@]}" || rc=1
    run_pytest "$VENV/bin/python" tests/adapters "${PYTEST_ARGS[@]}" || rc=1
    PYTHONPATH="$MEGATRON_NEXT:tests/megatron_compat/cpu_site" run_pytest "$VENV/bin/python" \
        tests/megatron_compat "${PYTEST_ARGS[@]}" || rc=1
    return "$rc"
}

# -- as installed: wheel, sdist, the wheel's contents, the quickstart ---------------------------
leg_build() {
    rm -rf "$DIST"
    "$VENV/bin/python" -m build --outdir "$DIST" . > "$DIST.log" 2>&1 \
        || { cat "$DIST.log" >&2; return 1; }
    grep -E "^Successfully built" "$DIST.log"
    "$VENV/bin/twine" check --strict "$DIST"/*.whl "$DIST"/*.tar.gz
}

the_wheel() {
    local wheels=("$DIST"/megadata_core-*-py3-none-any.whl)
    [ -f "${wheels[0]}" ] || { echo "no wheel in $DIST/ (the build leg makes it)" >&2; return 1; }
    echo "${wheels[0]}"
}

leg_wheel() {
    local wheel
    wheel=$(the_wheel)
    MEGADATA_WHEEL=$(pwd -P)/$wheel run_pytest "$VENV/bin/python" tests/packaging \
        "${PYTEST_ARGS[@]}"
}

leg_quickstart() {
    local wheel
    wheel=$(the_wheel)
    PYTHON="$PYTHON" bash tools/quickstart_installed.sh "$wheel"
}

# -- other engineers' checks: run where their scripts exist --------------------------------------
leg_docs() {
    if [ -f tools/docs.sh ]; then bash tools/docs.sh; else echo "no tools/docs.sh: skipped"; fi
}
leg_typecheck() {
    if [ -f tools/typecheck.sh ]; then bash tools/typecheck.sh; else
        echo "no tools/typecheck.sh: skipped"; fi
}

# -- 3.12, 3.13: no torch ---------------------------------------------------------------------
# Every extra but torch (and bench: transformers is the preprocess bench's peer, and the
# bench needs torch), then the test tools without megatron-core.
TORCHLESS_EXTRAS="grain,jax,tensorstore,tokenizers,ray,parquet,msc,cli,test-base"

# find_python 3.12: a python3.12 on PATH that runs, else pyenv's newest 3.12.x.
find_python() {
    local version=$1 candidate
    if candidate=$(command -v "python$version") && "$candidate" -c 'import sys' 2>/dev/null
    then
        echo "$candidate"
        return 0
    fi
    if command -v pyenv >/dev/null 2>&1; then
        for candidate in $(ls -d "$(pyenv root)/versions/$version".* 2>/dev/null | sort -rV); do
            if [ -x "$candidate/bin/python$version" ]; then
                echo "$candidate/bin/python$version"
                return 0
            fi
        done
    fi
    return 1
}

# The requirements of the torch-free extras (megadata-core[...] references expanded), one a
# line: what prefetch_torchless installs before the package itself.
torchless_requirements() {
    "$PYTHON" - "$TORCHLESS_EXTRAS" <<'PY'
import re, sys, tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
todo, seen, out = sys.argv[1].split(","), set(), []
while todo:
    name = todo.pop()
    if name in seen:
        continue
    seen.add(name)
    for requirement in extras[name]:
        inner = re.fullmatch(r"megadata-core\[([\w,-]+)\]", requirement)
        if inner:
            todo += inner[1].split(",")
        else:
            out.append(requirement)
print("\n".join(sorted(set(out))))
PY
}

# prefetch_torchless VERSION: the venv of a torch-free leg with its dependencies, started in
# the background at the beginning (its downloads and unpacking overlap the 3.11 legs); the
# leg then installs the package itself. Output in .venv-VERSION.prefetch.log, its exit
# status in .venv-VERSION.prefetch.rc once it ends (the legs run in subshells, which cannot
# wait for it).
prefetch_torchless() {
    local version=$1 python venv=".venv-$1" requirements
    wants "$version" || return 0
    python=$(find_python "$version") || return 0
    requirements=$(mktemp "${TMPDIR:-/tmp}/megadata-requirements.XXXXXX")
    torchless_requirements > "$requirements"
    rm -f "$venv.prefetch.rc" "$venv.prefetch.log"
    (
        { [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"; } &&
        quiet_pip "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            -c "$NO_TORCH" -r "$requirements"
        rc=$?
        rm -f "$requirements"
        echo "$rc" > "$venv.prefetch.rc"
    ) > "$venv.prefetch.log" 2>&1 &
}

# wait_prefetch VERSION: the background install of that leg has ended (its log shown on
# failure; the leg's own install then says what is missing).
wait_prefetch() {
    local venv=".venv-$1"
    [ -f "$venv.prefetch.log" ] || return 0  # none was started
    while [ ! -f "$venv.prefetch.rc" ]; do sleep 2; done
    [ "$(cat "$venv.prefetch.rc")" = 0 ] || { echo "background install of $venv failed:" >&2
        cat "$venv.prefetch.log" >&2; }
}

leg_torchless() {
    local version=$1 python venv=".venv-$1"
    if ! python=$(find_python "$version"); then
        echo "Python $version not found (no python$version on PATH that runs, no pyenv" \
            "$version.x): its leg is skipped"
        return 77
    fi
    wait_prefetch "$version"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    quiet_pip "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        -c "$NO_TORCH" -e ".[$TORCHLESS_EXTRAS]"
    ! "$venv/bin/python" -c 'import torch' 2>/dev/null \
        || { echo "$venv has torch: this leg is for the tests without it" >&2; return 1; }
    local rc=0 torchless=(-p torchless)
    export PYTHONPATH=$PWD/tests/packaging  # the torchless plugin
    # The same tests as 3.11, derandomized, with a quarter of each property test's generated
    # examples (tests/conftest.py; explicit @examples all run): 3.11 runs them all.
    export MEGADATA_HYPOTHESIS_SCALE=${MEGADATA_HYPOTHESIS_SCALE:-0.25}
    echo "Python $version leg: without tests/megatron_compat (megatron-core needs torch) and" \
        "tests/tools/test_bench_smoke.py (the benchmarks, whose peers are Megatron's and" \
        "torch's; run on 3.11); tests importing torch or megatron are skipped, named below"
    run_pytest "$venv/bin/python" "${torchless[@]}" --ignore=tests/adapters \
        --ignore=tests/megatron_compat --ignore=tests/packaging --ignore=tests/trainers \
        --ignore=tests/tools/test_bench_smoke.py "${PYTEST_ARGS[@]}" || rc=1
    run_pytest "$venv/bin/python" "${torchless[@]}" tests/adapters "${PYTEST_ARGS[@]}" || rc=1
    return "$rc"
}
leg_312() { leg_torchless 3.12; }
leg_313() { leg_torchless 3.13; }

# -- the trainers: MaxText 0.2.5 (Python 3.12) and torchtitan 0.3.0 (3.11, torch 2.13.0 CPU) ----
# Their installs are heavy (2.8 GB and 1.6 GB), so their venvs live outside the checkout and
# are kept between runs, one per pinned release, complete once marked so; megadata itself
# goes into them editable from this checkout on every run (seconds).
TRAINER_VENVS=${MEGADATA_TRAINER_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/megadata/venvs}
TRAINER_TEST_TOOLS=(pytest pytest-xdist hypothesis psutil)

# trainer_venv DIR PYTHON PIP_ARGS...: DIR with PIP_ARGS installed (made once, then kept).
trainer_venv() {
    local venv=$1 python=$2
    shift 2
    [ -f "$venv/.complete" ] && return 0
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
    quiet_pip "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
    touch "$venv/.complete"
}

leg_maxtext() {
    local python venv="$TRAINER_VENVS/maxtext-0.2.5-py3.12"
    if ! python=$(find_python 3.12); then
        echo "Python 3.12 not found (MaxText 0.2.5 needs it): its leg is skipped"
        return 77
    fi
    trainer_venv "$venv" "$python" -c "$NO_TORCH" "maxtext[tpu]==0.2.5" \
        "${TRAINER_TEST_TOOLS[@]}"
    quiet_pip "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        -c "$NO_TORCH" -e ".[grain,jax,cli]"
    "$venv/bin/python" -c "import maxtext"  # the tests would skip without it
    run_pytest "$venv/bin/python" tests/trainers/test_maxtext.py "${PYTEST_ARGS[@]}"
}

leg_torchtitan() {
    local venv="$TRAINER_VENVS/torchtitan-0.3.0-torch2.13.0-py3.11"
    # torch pinned to the CPU build on disk in every install (any other spec pulls CUDA)
    trainer_venv "$venv" "$PYTHON" torch==2.13.0 torchtitan==0.3.0 "datasets<4.8" \
        "${TRAINER_TEST_TOOLS[@]}"
    quiet_pip "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        torch==2.13.0 -e ".[cli]"
    "$venv/bin/python" -c "import torchtitan"  # the tests would skip without it
    local failed=0
    run_pytest "$venv/bin/python" tests/trainers/test_torchtitan.py \
        tests/trainers/test_torchtitan_train.py "${PYTEST_ARGS[@]}" || failed=1
    # raw-shards members through the torchtitan loader (the file's other tests run in 3.11)
    run_pytest "$venv/bin/python" tests/adapters/test_raw_shards_adapters.py -k torchtitan \
        "${PYTEST_ARGS[@]}" || failed=1
    return "$failed"
}

PYTEST_ARGS=("$@")
if wants lint || wants 3.11 || wants build || wants wheel; then
    LEGS="$LEGS setup"
fi
prefetch_torchless 3.12
prefetch_torchless 3.13
leg setup setup_311
leg lint leg_lint
leg build leg_build
leg wheel leg_wheel
leg quickstart leg_quickstart
leg 3.11 leg_311
leg docs leg_docs
leg typecheck leg_typecheck
leg 3.12 leg_312
leg 3.13 leg_313
leg maxtext leg_maxtext
leg torchtitan leg_torchtitan

echo "=== wall time of each leg"
printf '%s\n' "${TIMES[@]}"
for name in "${STARTED[@]}"; do  # a leg that started must have its row
    printf '%s\n' "${TIMES[@]}" | grep -q "^$name " || {
        echo "=== leg $name started but recorded no time: counted as failed"; status=1; }
done
echo "=== all: $((SECONDS - START)) s, $([ "$status" -eq 0 ] && echo passed || echo FAILED)"
exit "$status"
