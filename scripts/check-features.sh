#!/usr/bin/env bash
# Builds the facade (the package jq-queue) with each backend feature set a
# user can pick, and checks that a backend left out is not compiled at all
# (its driver is absent from the dependency tree). Each set builds its own dependency graph, so
# this takes minutes; CI does not run it (its test command builds all
# features together).
#
#   bash scripts/check-features.sh
set -euo pipefail
cd "$(dirname "$0")/.."

check() { # name, cargo feature arguments, drivers that must be absent
    local name=$1 args=$2 absent=$3
    echo "== cargo build -p jq-queue $args"
    # shellcheck disable=SC2086 # the feature arguments are words
    cargo build --locked -p jq-queue $args
    local tree
    # shellcheck disable=SC2086
    tree=$(cargo tree --locked -p jq-queue -e normal $args)
    for driver in $absent; do
        if grep -q " $driver v" <<<"$tree"; then
            echo "FAIL: $name compiles $driver" >&2
            exit 1
        fi
    done
    echo "ok: $name${absent:+ (without $absent)}"
}

check "default (sqlite)" "" "sqlx redis"
check "postgres only" "--no-default-features --features postgres" "rusqlite redis"
check "redis only" "--no-default-features --features redis" "rusqlite sqlx"
check "all three" "--features sqlite,postgres,redis" ""
check "no backend (a custom one)" "--no-default-features" "rusqlite sqlx redis"
