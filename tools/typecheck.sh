#!/usr/bin/env bash
# Type-check the shipped packages with mypy (configured in pyproject.toml's [tool.mypy]).
#   bash tools/typecheck.sh [extra mypy arguments]
# The installed names come from a setuptools package-dir mapping (adapters/ ->
# megadata_adapters, tools/cli/ -> megadata_cli) and the editable install's import hook,
# which mypy cannot follow: a temporary folder of symlinks gives mypy the installed names.
# Scope: all of megadata_core and the adapters' public modules (the framework skins, the
# storage sources, the Megatron drop-in). Exits non-zero on any error.
# Environment: MEGADATA_VENV (default .venv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

ARGS=("$@")

VENV=${MEGADATA_VENV:-.venv}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "typecheck: no python at $PY (set MEGADATA_VENV)" >&2; exit 2; }
"$PY" -c "import mypy" 2>/dev/null \
    || "$PY" -m pip install --quiet --disable-pip-version-check "mypy==2.4.1"

# The symlinks live in mypy's cache folder (ignored by git through the cache's own
# .gitignore), at a fixed path so that the incremental cache stays valid between runs.
CACHE="$ROOT/.mypy_cache"
NAMES="$CACHE/installed-names"
mkdir -p "$NAMES"
[ -e "$CACHE/.gitignore" ] || printf '# Automatically created by tools/typecheck.sh\n*\n' \
    >"$CACHE/.gitignore"
ln -sfn "$ROOT/megadata_core" "$NAMES/megadata_core"
ln -sfn "$ROOT/adapters" "$NAMES/megadata_adapters"
ln -sfn "$ROOT/tools/cli" "$NAMES/megadata_cli"

# The symlinks come first on the search path, so each module has its installed name only;
# the paths in mypy's report are turned back into the repository's.
REPORT="$CACHE/report.txt"
set +e
MYPYPATH="$NAMES" "$PY" -m mypy --config-file "$ROOT/pyproject.toml" --cache-dir "$CACHE" \
    -p megadata_core \
    -m megadata_adapters \
    -m megadata_adapters.frameworks \
    -m megadata_adapters.frameworks.grain_source \
    -m megadata_adapters.frameworks.torch_data \
    -m megadata_adapters.frameworks.jax_sharding \
    -m megadata_adapters.storage \
    -m megadata_adapters.storage.tensorstore_bins \
    -m megadata_adapters.storage.msc_bins \
    -p megadata_adapters.trainers \
    "${ARGS[@]}" 2>&1 | sed -E -e "s#($NAMES|\.mypy_cache/installed-names)/megadata_adapters/#adapters/#g" \
        -e "s#($NAMES|\.mypy_cache/installed-names)/megadata_cli/#tools/cli/#g" \
        -e "s#($NAMES|\.mypy_cache/installed-names)/megadata_core/#megadata_core/#g" >"$REPORT"
STATUS=${PIPESTATUS[0]}
set -e
cat "$REPORT"
exit "$STATUS"  # 1: type errors; 2: mypy itself failed
