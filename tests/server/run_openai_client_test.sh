#!/usr/bin/env bash
# Runs openai_client_test.py in a virtual environment with the pinned `openai` client, made on first use.
# Exits 77 (CTest's SKIP_RETURN_CODE) when the environment cannot be made (no venv module, no network).
# usage: run_openai_client_test.sh BUILD_DIR SWITCHYARD_BINARY SOURCE_DIR
set -uo pipefail
build=$1 binary=$2 source=$3
version=3.51.0
venv=$build/openai-venv
if ! "$venv/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$version')" 2>/dev/null; then
  python3 -m venv "$venv" || { echo "SKIP: python3 -m venv failed (Debian: apt-get install python3-venv)"; exit 77; }
  "$venv/bin/pip" install -q "openai==$version" ||
    { echo "SKIP: pip could not install openai==$version (no network or no index)"; exit 77; }
fi
exec "$venv/bin/python" "$source/tests/server/openai_client_test.py" --binary "$binary" --source-dir "$source"
