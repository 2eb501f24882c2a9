#!/usr/bin/env bash
# Build the docs site (Sphinx + MyST) into docs/_build/html; any warning fails the build.
#   bash tools/docs.sh [extra sphinx-build arguments]
# Environment: MEGADATA_VENV (default .venv), PYTHON (default python3.11). The venv is
# made if missing; `.[all,docs]` is installed only when Sphinx is not there yet (the
# API pages import every adapter, so its frameworks must be installed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
VENV=${MEGADATA_VENV:-.venv}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
if ! "$VENV/bin/python" -c "import sphinx, myst_parser, furo" >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[all,docs]"
fi

# The API pages import the adapters: JAX on 8 CPU devices, megatron-core's import-time
# notice about Transformer Engine silenced (it is not a docs warning).
export XLA_FLAGS=${XLA_FLAGS:---xla_force_host_platform_device_count=8}
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
export PYTHONWARNINGS=${PYTHONWARNINGS:-ignore:Transformer Engine and Apex are not installed}

rm -rf docs/_build
"$VENV/bin/python" -m sphinx -W --keep-going -q -b html docs docs/_build/html "$@"
echo "docs built: docs/_build/html/index.html"
