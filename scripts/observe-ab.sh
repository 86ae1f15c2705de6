#!/usr/bin/env bash
# What observation (spans and metrics) costs the drain, as an A/B taken in
# one sitting: PAIRS interleaved pairs of the bench's drain with
# `--observe off` then `--observe on`, each the median of RUNS drains, and
# the median of the pair ratios. Run it on a quiet machine.
#
#   bash scripts/observe-ab.sh sqlite|postgres|redis [PAIRS=6] [RUNS=5]
set -euo pipefail
backend=${1:?usage: scripts/observe-ab.sh sqlite|postgres|redis [PAIRS] [RUNS]}
pairs=${2:-6}
runs=${3:-5}
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p examples --example bench
bench=target/release/examples/bench
drain() { "$bench" "$backend" --only drain --runs "$runs" --observe "$1" 2>/dev/null | awk '/^drain/ {print $(NF-1)}'; }
ratios=()
for i in $(seq "$pairs"); do
  off=$(drain off)
  on=$(drain on)
  ratio=$(awk -v a="$off" -v b="$on" 'BEGIN {printf "%.3f", b / a}')
  ratios+=("$ratio")
  echo "pair $i: off $off jobs/s, on $on jobs/s, on/off $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk -v b="$backend" '{r[NR] = $1} END {
  m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
  printf "%s: median on/off of %d pairs: %.3f\n", b, NR, m }'
