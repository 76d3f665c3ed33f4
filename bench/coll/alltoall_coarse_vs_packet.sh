#!/bin/bash
# bench/coll/alltoall_coarse_vs_packet.sh — all-to-all on the coarse model (plan_sim.hpp, with the
# switch links of the SM's routes) against the packet-level fabric, per topology, routing engine
# and size: the time of each (us, virtual: deterministic, one run each), their ratio and the
# coarse model's most flows on one switch link. emu/collsim/README.md "All-to-all" and "Head-of-line
# blocking" have the tables (the coarse model's bounds there are coarse_caveat's).
# usage: bench/coll/alltoall_coarse_vs_packet.sh [BUILD_DIR]
#   TOPOS ("rail:nodes=8,gpus=4,spines=2 rail:nodes=8,gpus=4,spines=1
#   fat-tree:levels=2,radix=8"), ENGINES ("minhop updn"), SIZES ("64K 256K 1M 4M") override the
#   matrix; FABRICS ("coarse packet") e.g. "coarse" alone for the coarse column only.
set -eu
build=${1:-build}
weft="$build/tools/weft/weft"
topos=${TOPOS:-rail:nodes=8,gpus=4,spines=2 rail:nodes=8,gpus=4,spines=1 fat-tree:levels=2,radix=8}
engines=${ENGINES:-minhop updn}
sizes=${SIZES:-64K 256K 1M 4M}
fabrics=${FABRICS:-coarse packet}
[ -x "$weft" ] || { echo "build $weft first (ninja -C $build tools/weft/weft)"; exit 1; }

run() {  # fabric topology engine size -> "time_us switch_flows_max"
  local out
  out=$("$weft" sim --workload alltoall --topology "$2" --engine "$3" -b "$4" -e "$4" \
    --timing-only --fabric "$1" --json)
  python3 -c 'import json,sys; r=json.loads(sys.argv[1])["rows"][0]; print(r["time_us"], r.get("switch_flows_max", 0))' "$out"
}

echo "# $(uptime)"
printf '%-34s %-7s %5s %10s %10s %7s %6s\n' topology engine size coarse_us packet_us ratio flows
for t in $topos; do
  ratios=""
  for e in $engines; do
    for s in $sizes; do
      c=- p=- f=-
      [[ " $fabrics " == *" coarse "* ]] && read -r c f < <(run coarse "$t" "$e" "$s")
      [[ " $fabrics " == *" packet "* ]] && read -r p _ < <(run packet "$t" "$e" "$s")
      r=$(python3 -c 'import sys; c, p = sys.argv[1:]; print("-" if "-" in (c, p) else "%.3f" % (float(c) / float(p)))' "$c" "$p")
      printf '%-34s %-7s %5s %10s %10s %7s %6s\n' "$t" "$e" "$s" "$c" "$p" "$r" "$f"
      [ "$r" != - ] && ratios="$ratios $r"
    done
  done
  # The bounds coarse_caveat (emu/collsim/collsim.cpp) quotes for this kind of topology.
  [ -n "$ratios" ] && python3 -c 'import sys; r = [float(x) for x in sys.argv[2:]]; print("# %s: coarse / packet %.3f-%.3f" % (sys.argv[1], min(r), max(r)))' "$t" $ratios
done
