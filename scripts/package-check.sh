#!/usr/bin/env bash
# What someone outside this repository gets from the packaged crates:
#
# 1. Every published crate packages: `cargo package --workspace --locked`
#    (the publish = false crates left out: nobody gets them), each verified
#    by building it from its own .crate file.
# 2. A fresh project in a temporary directory, made of the README's install
#    block (its Cargo.toml) and the README's quickstart program (its
#    main.rs), builds against those .crate files and runs to completion.
# 3. jqctl installs from the packaged jq-cli (`cargo install --path` of the
#    unpacked crate) and reads the jobs the quickstart stored.
#
#   bash scripts/package-check.sh                 # a clean tree, as in CI
#   bash scripts/package-check.sh --allow-dirty   # arguments go to cargo package
#
# Our crates are not on crates.io yet: the fresh project's workspace
# unpacks the .crate files beside it and patches crates.io with them
# ([patch.crates-io]); every other dependency comes from crates.io, at the
# versions of this repository's Cargo.lock (copied in), so the check builds
# what the tests built. All steps share this repository's target directory
# (CARGO_TARGET_DIR to move it) and its dev profile's debug setting, so
# what one step compiles the next reuses. Needs the network (crates.io
# index and downloads) unless the registry cache already has every crate.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target=${CARGO_TARGET_DIR:-$repo/target}
export CARGO_TARGET_DIR=$target
# The workspace's [profile.dev] debug; the fresh project and the verify
# builds would otherwise take cargo's default (full debug info).
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
start=$SECONDS

# The workspace's members, split by their manifests into the published
# crates and the publish = false ones.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
excluded=()
published=()
while IFS= read -r manifest; do
    name=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -n 1)
    if grep -q '^publish = false$' "$manifest"; then
        excluded+=(--exclude "$name")
    else
        published+=("$name")
    fi
done < <(cargo metadata --locked --no-deps --format-version 1 | grep -o '"manifest_path":"[^"]*"' | cut -d'"' -f4)

echo "== cargo package --workspace --locked: ${published[*]}"
# Every crate's tests stay in the repository (see any crate's `include`),
# and cargo names each one it leaves out: those lines are expected, not news.
set +e
cargo package --workspace --locked "${excluded[@]}" "$@" 2>&1 | grep -Ev '^warning: ignoring (test|example|bench) `'
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || { echo "FAIL: cargo package (exit $status)" >&2; exit "$status"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/jq-package-check.XXXXXX")
# Kept when a step fails, for a look at what the user would have.
trap 'if [ $? -eq 0 ]; then rm -rf "$work"; else echo "package check: the fresh project is kept in $work" >&2; fi' EXIT
mkdir -p "$work/crates" "$work/app/src"
for name in "${published[@]}"; do
    tar -xzf "$target/package/$name-$version.crate" -C "$work/crates"
done

# The README's first toml block after "## Install", and its first Rust
# block after "## Quickstart": what a reader copies.
block() { # heading, fence language
    awk -v heading="$1" -v lang="$2" '
        $0 == heading { section = 1; next }
        section && !inside && index($0, "```" lang) == 1 { inside = 1; next }
        inside && /^```/ { exit }
        inside { print }
    ' README.md
}
deps=$(block "## Install" toml)
program=$(block "## Quickstart" rust)
[ -n "$deps" ] && [ -n "$program" ] || { echo "FAIL: README.md has no install block or no quickstart program" >&2; exit 1; }
if grep -q '^ *# ' <<<"$program"; then
    echo "FAIL: the README's quickstart has hidden lines: a reader would copy an incomplete program" >&2
    exit 1
fi

patches=""
for name in "${published[@]}"; do
    patches+="$name = { path = \"crates/$name-$version\" }"$'\n'
done
cat >"$work/Cargo.toml" <<EOF
[workspace]
resolver = "3"
members = ["app", "crates/jq-cli-$version"]

[patch.crates-io]
$patches
EOF
cat >"$work/app/Cargo.toml" <<EOF
[package]
name = "quickstart"
version = "0.1.0"
edition = "2024"
publish = false

$deps
EOF
printf '%s\n' "$program" >"$work/app/src/main.rs"
cp Cargo.lock "$work/Cargo.lock"

echo "== a fresh project: the README's install block and quickstart ($work/app)"
(cd "$work/app" && cargo run --quiet -p quickstart)

echo "== cargo install --path <packaged jq-cli> --debug"
cargo install --quiet --locked --debug --path "$work/crates/jq-cli-$version" --root "$work/root"
jqctl=$work/root/bin/jqctl
"$jqctl" --version
jobs=$("$jqctl" --url "sqlite://$work/app/jq-quickstart.db" --json list)
count=$(grep -c '"kind": "send_welcome"' <<<"$jobs" || true)
if [ "$count" -ne 2 ]; then
    echo "FAIL: jqctl lists $count of the quickstart's 2 jobs:" >&2
    echo "$jobs" >&2
    exit 1
fi
echo "ok: jqctl reads the quickstart's 2 jobs ($(grep -o '"state": "[a-z]*"' <<<"$jobs" | cut -d'"' -f4 | sort | uniq -c | xargs))"
echo "ok: package check in $((SECONDS - start)) s"
