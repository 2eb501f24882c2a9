#!/usr/bin/env bash
# The quickstart of docs/getting-started.md as a user meets it: megadata installed from the
# built wheel (not editable) into a fresh virtual environment in a temporary folder outside
# the checkout, then run from there: JSON lines -> megadata-preprocess ->
# megadata-build-index --config=single_corpus -> datasets -> Grain batches through
# GrainSource -> JAX global arrays on an 8-device CPU mesh.
#   bash tools/quickstart_installed.sh dist/megadata_core-X-py3-none-any.whl
# Environment: PYTHON (default python3.11), MEGADATA_QUICKSTART_KEEP=1 keeps the temporary
# folder (its path is printed). pip's cache is used as it is; the venv is always new.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
WHEEL=${1:?usage: quickstart_installed.sh WHEEL}
WHEEL=$(cd "$(dirname "$WHEEL")" && pwd -P)/$(basename "$WHEEL")
[ -f "$WHEEL" ] || { echo "quickstart: no wheel at $WHEEL" >&2; exit 1; }
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

TMP=$(mktemp -d "${TMPDIR:-/tmp}/megadata-quickstart.XXXXXX")
TMP=$(cd "$TMP" && pwd -P)
case "$TMP/" in "$ROOT"/*)
    echo "quickstart: $TMP is inside the checkout $ROOT; set TMPDIR elsewhere" >&2; exit 1;;
esac
if [ "${MEGADATA_QUICKSTART_KEEP:-}" = 1 ]; then
    echo "quickstart: keeping $TMP"
else
    trap 'rm -rf "$TMP"' EXIT
fi

step() { echo "quickstart [$((SECONDS - START)) s]: $*"; }
START=$SECONDS

step "fresh venv in $TMP/venv ($("$PYTHON" --version 2>&1))"
"$PYTHON" -m venv "$TMP/venv"
# torch may never come in (no extra asked for here needs it): a constraint no release meets.
printf 'torch<0\n' > "$TMP/no-torch.txt"
step "pip install '$(basename "$WHEEL")[grain,jax,cli]'"
"$TMP/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$TMP/no-torch.txt" "$WHEEL[grain,jax,cli]" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# From here on: the temporary folder, the venv's programs, nothing of the checkout.
mkdir "$TMP/work"
cd "$TMP/work"
unset PYTHONPATH PYTHONHOME
export PATH="$TMP/venv/bin:$PATH" PYTHONNOUSERSITE=1 MEGADATA_CHECKOUT="$ROOT"
export MEGADATA_CACHE="$TMP/megadata-cache"
export XLA_FLAGS=--xla_force_host_platform_device_count=8
PY="$TMP/venv/bin/python"

step "installed, not the checkout"
"$PY" - <<'EOF'
import os, sys, sysconfig
site = os.path.realpath(sysconfig.get_paths()["purelib"])
checkout = os.path.realpath(os.environ["MEGADATA_CHECKOUT"])
bad = [p for p in sys.path
       if (os.path.realpath(p or ".") + os.sep).startswith(checkout + os.sep)]
assert not bad, f"the checkout is on sys.path: {bad}"
import megadata_adapters, megadata_cli, megadata_cli.configs, megadata_core
for module in (megadata_core, megadata_adapters, megadata_cli, megadata_cli.configs):
    where = os.path.realpath(module.__file__)
    assert where.startswith(site + os.sep), f"{module.__name__} from {where}, not {site}"
    print(f"  {module.__name__}: {where}")
assert not any(os.path.isfile(os.path.join(site, n, "__init__.py"))
               for n in ("adapters", "tools", "configs", "tests")), "a stray top-level package"
EOF

step "every console script answers --help"
for script in megadata-preprocess megadata-preprocess-fast megadata-build-index \
        megadata-inspect megadata-merge megadata-megatron megadata-demo; do
    "$TMP/venv/bin/$script" --help > "$TMP/help.txt" 2>&1 || {
        cat "$TMP/help.txt" >&2; echo "quickstart: $script --help failed" >&2; exit 1; }
done

step "JSON lines (300 documents of the standard library's sources)"
"$PY" -m megadata_cli.make_demo_corpus --output quickstart.jsonl --max_documents 300
[ "$(wc -l < quickstart.jsonl)" -eq 300 ]

step "megadata-preprocess (the byte tokenizer: nothing to download)"
mkdir -p quickstart
megadata-preprocess --input quickstart.jsonl --output_prefix quickstart/corpus --append_eod \
    --workers 2 --noprogress
[ -s quickstart/corpus_text_document.bin ] && [ -s quickstart/corpus_text_document.idx ]

step "megadata-build-index --config=single_corpus (the shipped config)"
megadata-build-index --config=single_corpus --noprogress \
    --data_path=quickstart/corpus_text_document --split=98,2,0 \
    --config.sequence_length=512 --config.eod_id=256 --config.path_to_cache=index_cache \
    --train_samples=2000 --valid_samples=100 --test_samples=0
[ -n "$(ls -A index_cache)" ]

step "datasets from the cache -> Grain batches (GrainSource) -> JAX global arrays, 8 devices"
"$PY" - <<'EOF'
import os

import grain
import jax
import numpy as np

import megadata_core as mdc
from megadata_adapters import grain_source, jax_sharding


def listing(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)


cached = listing("index_cache")
config = mdc.GPTDataConfig(random_seed=1234, sequence_length=512, eod_id=256,
                           blend="quickstart/corpus_text_document", split="98,2,0",
                           path_to_cache="index_cache")
train, valid, test = mdc.build_datasets(config, sizes=[2000, 100, 0])
assert len(train) >= 2000 and len(valid) >= 100, (len(train), len(valid))
added = sorted(set(listing("index_cache")) - set(cached))
assert not [f for f in added if f.endswith(".npy")], f"indices built again, not read: {added}"
print(f"  from the cache megadata-build-index filled ({len(cached)} files; added: {added})")

assert jax.device_count() == 8, jax.devices()
mesh = jax_sharding.data_mesh(("data",))
source = grain_source.GrainSource(train)
batches = grain.MapDataset.source(source).shuffle(seed=3).batch(16, drop_remainder=True)
for step in range(3):
    batch = batches[step]
    assert batch["tokens"].shape == (16, 512), batch["tokens"].shape
    arrays = jax_sharding.global_batch(batch, mesh)
    tokens = arrays["tokens"]
    assert tokens.shape == (16, 512) and len(tokens.addressable_shards) == 8
    assert {shard.data.shape for shard in tokens.addressable_shards} == {(2, 512)}
    np.testing.assert_array_equal(np.asarray(tokens), batch["tokens"])
    print(f"  grain step {step}: {tokens.shape} {tokens.dtype} {tokens.sharding.spec}")

# the docs' pipeline: the batched micro-batch dataset
pipeline = grain_source.batched_dataset(train, micro_batch_size=16)
for step, batch in zip(range(2), pipeline):
    arrays = jax_sharding.global_batch(batch, mesh)
    assert arrays["tokens"].shape == (16, 512)
    print(f"  batched_dataset step {step}: {arrays['tokens'].shape}")
EOF
step "ok: installed quickstart passed"
