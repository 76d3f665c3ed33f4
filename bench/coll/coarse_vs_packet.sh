#!/bin/bash
# bench/coll/coarse_vs_packet.sh — the coarse NIC model of emu/collsim against the packet-level
# fabric (emu/fabric HCAs, rail and spine switches, credits, the SM) on the same 64-GPU cluster,
# measured side by side in this script: all-reduce busbw of each (timing only) and their ratio
# (goal: within 5 %), and the wall time of each simulation (the coarse model's speed-up, goal
# >= 100x). The coarse model runs twice: on the plans directly (`--fabric coarse`, plan_sim.hpp)
# and under a Communicator per rank (`--fabric coarse-comm`, the path it replaced for timing-only
# runs), so the speed-up of each is measured against the same packet-level run.
# Times are the simulation's (setup — plans, fabric, SM bring-up — excluded), medians of RUNS
# runs: its CPU time (`cpu_s`; both simulations are single-threaded, and CPU time is what a
# loaded machine does not inflate: the speed-ups are taken on it) and its wall time (`wall_s`,
# the wall speed-up in the last column); `proc` is the whole process's wall time (setup
# included). Virtual times are deterministic (one run suffices).
# usage: bench/coll/coarse_vs_packet.sh [BUILD_DIR] [RUNS]
#   TOPO (rail:nodes=8,gpus=8,spines=2), SIZES ("16M 64M"), CASES ("ring:1M ringx8:1M ring2:1M
#   ring2-pipe:4M tree:1M": algorithm[xCHANNELS]:chunk) override the matrix; COMM=0 skips the
#   coarse-comm runs.
# The coarse model shares the switch links of the SM's routes (switch_paths.hpp); `free` is the
# same plan engine with non-blocking switches (`--fabric coarse-free`, the model before) and
# `r_free` its ratio to the packet level, `flows` the most connections routed over one switch
# link (1 = none shared).
set -eu
build=${1:-build}
runs=${2:-3}
weft="$build/tools/weft/weft"
topo=${TOPO:-rail:nodes=8,gpus=8,spines=2}
sizes=${SIZES:-16M 64M}
cases=${CASES:-ring:1M ringx8:1M ring2:1M ring2-pipe:4M tree:1M}
comm=${COMM:-1}
[ -x "$weft" ] || { echo "build $weft first (ninja -C $build tools/weft/weft)"; exit 1; }

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
row() {  # fabric algo channels chunk size -> "busbw cpu_s wall_s process_s switch_flows_max"
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$("$weft" sim --workload allreduce --topology "$topo" --algo "$2" --channels "$3" \
    --chunk "$4" -b "$5" -e "$5" --dtype bf16 --timing-only --fabric "$1" --json)
  t1=$(date +%s.%N)
  python3 -c 'import json,sys; r=json.loads(sys.argv[1])["rows"][0]; print(r["busbw"], r["cpu_s"], r["wall_s"], float(sys.argv[3]) - float(sys.argv[2]), r.get("switch_flows_max", 0))' \
    "$out" "$t0" "$t1"
}
med() { printf '%s\n' "$@" | median; }

summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
echo "# $(uptime)"
printf '# %s, bf16 sum all-reduce, timing only; busbw GB/s; s (median of %s)\n' "$topo" "$runs"
printf '%-13s %5s %5s %8s %8s %7s %9s %9s %9s %7s %7s %9s %9s %7s %8s %8s %8s %7s %5s\n' algo size chunk \
  coarse packet ratio cpu_crs cpu_comm cpu_pkt speedup sp_comm wall_crs wall_pkt sp_wall \
  proc_crs proc_pkt free r_free flows
for c in $cases; do
  algo=${c%%:*}
  chunk=${c##*:}
  ch=1
  if [[ $algo == *x* ]]; then
    ch=${algo##*x}
    algo=${algo%x*}
  fi
  for s in $sizes; do
    cc=() cw=() cp=() mc=() pc=() pw=() pp=()
    mb=0
    for _ in $(seq "$runs"); do
      read -r cb u w p fl < <(row coarse "$algo" "$ch" "$chunk" "$s")
      cc+=("$u") cw+=("$w") cp+=("$p")
      if [ "$comm" = 1 ]; then
        read -r mb u w p _ < <(row coarse-comm "$algo" "$ch" "$chunk" "$s")
        mc+=("$u")
      fi
      read -r pb u w p _ < <(row packet "$algo" "$ch" "$chunk" "$s")
      pc+=("$u") pw+=("$w") pp+=("$p")
    done
    read -r fb _ < <(row coarse-free "$algo" "$ch" "$chunk" "$s")  # virtual: one run suffices
    ccm=$(med "${cc[@]}")
    cwm=$(med "${cw[@]}")
    cpm=$(med "${cp[@]}")
    mcm=$([ "$comm" = 1 ] && med "${mc[@]}" || echo 0)
    pcm=$(med "${pc[@]}")
    pwm=$(med "${pw[@]}")
    ppm=$(med "${pp[@]}")
    name=$algo
    [ "$ch" != 1 ] && name="$algo x$ch"
    awk -v a="$name" -v s="$s" -v k="$chunk" -v cb="$cb" -v pb="$pb" -v mb="$mb" -v ccm="$ccm" \
      -v mcm="$mcm" -v pcm="$pcm" -v cwm="$cwm" -v pwm="$pwm" -v cpm="$cpm" -v ppm="$ppm" -v fb="$fb" -v fl="$fl" 'BEGIN {
        if (mb != 0 && mb != cb) printf "# note: coarse-comm busbw %.2f (plans %.2f)\n", mb, cb
        printf "%-13s %5s %5s %8.2f %8.2f %7.4f %9.5f %9.5f %9.4f %6.0fx %6.0fx %9.5f %9.4f %6.0fx %8.3f %8.3f %8.2f %7.4f %5d\n",
          a, s, k, cb, pb, cb / pb, ccm, mcm, pcm, pcm / ccm, (mcm > 0 ? pcm / mcm : 0), cwm, pwm,
          pwm / cwm, cpm, ppm, fb, fb / pb, fl }'
    printf '%s %s %s %s %s\n' "${name// /}" "$cb" "$pb" "$ccm" "$pcm" >>"$summary"
  done
done
echo "# per algorithm: coarse/packet busbw (range), CPU speed-up (smallest) over the sizes"
awk '{ r = $2 / $3; s = $5 / $4; a = $1
       if (!(a in n)) { order[++k] = a; lo[a] = hi[a] = r; sp[a] = s }
       n[a]++; if (r < lo[a]) lo[a] = r; if (r > hi[a]) hi[a] = r; if (s < sp[a]) sp[a] = s
       d = (r > 1 ? r - 1 : 1 - r); if (d > worst) worst = d; if (!(minsp) || s < minsp) minsp = s }
     END { for (i = 1; i <= k; i++) { a = order[i]
             printf "%-13s ratio %.4f-%.4f  speed-up >= %.0fx\n", a, lo[a], hi[a], sp[a] }
           printf "all           worst |ratio-1| %.2f %%  (bound 5 %%), smallest speed-up %.0fx (goal 100x)\n",
             100 * worst, minsp }' "$summary"
