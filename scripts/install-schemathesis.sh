#!/usr/bin/env bash
# Installs schemathesis (from PyPI, pinned) into a virtualenv of its own,
# ${JQ_SCHEMATHESIS_VENV:-$HOME/.cache/jq/schemathesis-<version>}, where
# the HTTP API's property test (jq-dashboard/tests/api_schemathesis.rs)
# finds it. Idempotent: an existing install of this version is kept.
# Prints the path of the st executable.
set -euo pipefail
version=4.32.5
venv=${JQ_SCHEMATHESIS_VENV:-$HOME/.cache/jq/schemathesis-$version}
if [ ! -x "$venv/bin/st" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version" >&2
fi
echo "$venv/bin/st"
