#!/usr/bin/env bash
# A long run of the standing differential test against torch 2.15 (the oracle).
#
# usage: scripts/oracle/oracle_random.sh [CASES] [SEED] [OUT_DIR]
#
# Each case is a random trace (1-6 streams) and a random configuration over every key torch
# 2.15 accepts, replayed at the OOM boundary found by bisection and at +-2 MiB and +-64 MiB:
# five runs per case. Traces that differ are copied to OUT_DIR (default target/oracle-random)
# for scripts/oracle/oracle_diff.py --shrink. It uses the release profile (the build the README's
# test command makes). The last line is the summary:
#   oracle_random: R runs, I identical, D differ (seed S, C cases)
set -euo pipefail
cd "$(dirname "$0")/../.."
cases="${1:-200}"
seed="${2:-$(date +%s)}"
out="${3:-target/oracle-random}"
CACHALOT_ORACLE_RUNS="$cases" CACHALOT_ORACLE_SEED="$seed" CACHALOT_ORACLE_OUT="$out" \
  cargo test -q --release -p cachalot-replay --test oracle_random -- --nocapture 2>&1 \
  | grep -v '^\s*$' | grep -Ev '^(running|test result|test random)' || true
