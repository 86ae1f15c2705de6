#!/usr/bin/env bash
# Runs scripts/peers/dbos_bench.py: DBOS (Python) doing what jq's bench
# `--only durable` does for its "durable jobs" row (1,000 workflows of 10
# checkpointed trivial steps, concurrency 16, on PostgreSQL 127.0.0.1:5432),
# and prints the median steps/s. Usage:
#   scripts/peers/dbos-bench.sh [--runs 3] [--variant sync|async] [--polling-interval 1.0]
# Makes a venv at $DBOS_VENV (default /tmp/dbos-venv) with dbos $DBOS_VERSION
# in it if missing; writes nothing into the repository. Recreates (drops!)
# the database peer_dbos on every run, and touches no other database.
set -euo pipefail

DBOS_VERSION="${DBOS_VERSION:-3.4.0}"
VENV="${DBOS_VENV:-/tmp/dbos-venv}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
# Pinned, so two sittings compare the same DBOS; pip is quick when it is there.
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('dbos') != '$DBOS_VERSION')" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet "dbos==$DBOS_VERSION"
fi
echo "dbos $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("dbos"))')," \
    "$("$VENV/bin/python" --version)" >&2
exec "$VENV/bin/python" "$here/dbos_bench.py" "$@"
