#!/usr/bin/env bash
# The whole test suite, every part of it: starts (installing where missing)
# PostgreSQL, Redis and the headless browser (scripts/start-services.sh),
# then runs every test with JQ_REQUIRE_SERVICES=1, so a service that is
# still missing fails the run instead of skipping its tests.
# Arguments go to cargo test: scripts/test.sh -- claim_ runs the claim tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/start-services.sh
JQ_REQUIRE_SERVICES=1 cargo test --workspace --all-features --locked "$@"
