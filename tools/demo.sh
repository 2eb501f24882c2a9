#!/usr/bin/env bash
# Set up a virtual environment from scratch and run the demo.
#   bash tools/demo.sh [demo flags, e.g. --max_documents 500]
# Environment: MEGADATA_VENV (default .venv), PYTHON (default python3.11).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
VENV=${MEGADATA_VENV:-.venv}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[cli,grain,jax]"
exec "$VENV/bin/megadata-demo" "$@"
