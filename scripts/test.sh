#!/usr/bin/env bash
# The whole test suite, every part of it: starts (installing where missing)
# PostgreSQL, Redis and the headless browser (scripts/start-services.sh),
# then runs every test with JQ_REQUIRE_SERVICES=1, so a service that is
# still missing fails the run instead of skipping its tests; then the
# PostgreSQL and Redis backends' suites again on PostgreSQL 18 and Valkey 9.
# Arguments go to cargo test: scripts/test.sh -- claim_ runs the claim tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/start-services.sh
JQ_REQUIRE_SERVICES=1 cargo test --workspace --all-features --locked "$@"
# The backend suites again on the newer servers start-services.sh started:
# PostgreSQL 18 (its programs first on PATH, for the tests that start their
# own server or dump the schema) and Valkey 9 (its server as `redis-server`
# first on PATH, for the tests that start their own, a Cluster included).
echo "test: jq-postgres on PostgreSQL 18, jq-redis on Valkey 9"
pgbin=$(bash scripts/newer-servers.sh pgbin)
valkey=$(bash scripts/newer-servers.sh valkey-dir)
PATH="$pgbin:$PATH" JQ_REQUIRE_SERVICES=1 JQ_POSTGRES_URL=postgres://postgres@127.0.0.1:5418/postgres \
  cargo test -p jq-postgres --all-features --locked "$@"
PATH="$valkey:$PATH" JQ_REQUIRE_SERVICES=1 JQ_REDIS_URL=redis://127.0.0.1:6389 \
  cargo test -p jq-redis --all-features --locked "$@"
