#!/usr/bin/env bash
# tests/demo/run_demo_test.sh — tools/run-demo, exactly as a new user runs it (against this build
# directory): every step exits 0, the packet-level all-reduces are exact (#wrong 0), the healthy
# run loses nothing, and the failed link is logged, re-routed by the SM and retransmitted over.
set -euo pipefail
src=$1 build=$2
out=$(WEFT_BUILD_DIR="$build" "$src/tools/run-demo" 2>&1) || { echo "$out"; echo "FAIL: run-demo exited $?"; exit 1; }
fail() { echo "$out"; echo "FAIL: $*"; exit 1; }
grep -q '^=== 4/4' <<<"$out" || fail "the demo did not reach step 4"
[ "$(grep -c 'algo ring2, channels' <<<"$out")" = 1 ] || fail "no two-stage ring table"
# Both packet-level rows: 4 MiB, #wrong (column 8) is 0.
rows=$(awk '$1 == 4194304 && $11 == "ring" && $8 == "0"' <<<"$out" | wc -l)
[ "$rows" = 2 ] || fail "expected 2 exact packet-level rows, got $rows"
grep -q '16 QPs, 0 discarded; SM: bring-up' <<<"$out" || fail "the healthy run discarded packets"
grep -q 'fault log .* link down: rail07/p9 - spine000/p29' <<<"$out" || fail "no link-down in the fault log"
grep -q 'SM re-routed' <<<"$out" || fail "the SM did not re-route"
grep -q '1 re-route(s)' <<<"$out" || fail "no re-route counted"
echo "run-demo: ok"
