#!/bin/bash
# bench/coll/coarse_vs_packet.sh — the coarse NIC model of emu/collsim against the packet-level
# fabric (emu/fabric HCAs, rail and spine switches, credits, the SM) on the same 64-GPU cluster,
# measured side by side in this script: all-reduce busbw of each (timing only) and their ratio
# (goal: within 5 %), and the wall time of each simulation (the coarse model's speed-up).
# Wall times are medians of RUNS runs; virtual times are deterministic (one run suffices).
# usage: bench/coll/coarse_vs_packet.sh [BUILD_DIR] [RUNS]
#   TOPO (rail:nodes=8,gpus=8,spines=2), SIZES ("16M 256M"), CASES ("ring:1M ring2:1M
#   ring2-pipe:4M": algorithm:chunk) override the matrix.
set -eu
build=${1:-build}
runs=${2:-3}
weft="$build/tools/weft/weft"
topo=${TOPO:-rail:nodes=8,gpus=8,spines=2}
sizes=${SIZES:-16M 256M}
cases=${CASES:-ring:1M ring2:1M ring2-pipe:4M}
[ -x "$weft" ] || { echo "build $weft first (ninja -C $build tools/weft/weft)"; exit 1; }

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
row() {  # fabric algo chunk size -> "busbw wall_s"
  "$weft" sim --workload allreduce --topology "$topo" --algo "$2" --chunk "$3" -b "$4" -e "$4" \
    --dtype bf16 --timing-only --fabric "$1" --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["rows"][0]; print(r["busbw"], r["wall_s"])'
}

printf '# %s, bf16 sum all-reduce, timing only; busbw GB/s, wall s (median of %s)\n' "$topo" "$runs"
printf '%-11s %6s %5s %10s %10s %8s %10s %10s %8s\n' algo size chunk coarse packet ratio \
  wall_coarse wall_packet speedup
for c in $cases; do
  algo=${c%%:*}
  chunk=${c##*:}
  for s in $sizes; do
    cw=()
    pw=()
    for _ in $(seq "$runs"); do
      read -r cb w < <(row coarse "$algo" "$chunk" "$s")
      cw+=("$w")
    done
    for _ in $(seq "$runs"); do
      read -r pb w < <(row packet "$algo" "$chunk" "$s")
      pw+=("$w")
    done
    cm=$(printf '%s\n' "${cw[@]}" | median)
    pm=$(printf '%s\n' "${pw[@]}" | median)
    awk -v a="$algo" -v s="$s" -v k="$chunk" -v cb="$cb" -v pb="$pb" -v cm="$cm" -v pm="$pm" \
      'BEGIN {printf "%-11s %6s %5s %10.2f %10.2f %8.4f %10.4f %10.3f %7.0fx\n", a, s, k, cb, pb, cb / pb, cm, pm, pm / cm}'
  done
done
