#!/bin/bash
# bench/sim/sim_speed.sh — simulation speed of `weft sim` against ns-3, measured side by side.
#   1. ns-3 (Debian libns3-dev): ns3_bench p2p 300000 1024 — two nodes, 1 KiB UDP packets.
#   2. weft sim: two HCAs on one switch, one RDMA WRITE stream (64 KiB messages, 8 deep),
#      1 KiB MTU, default configuration (verified mode: every packet materialized, ICRC and VCRC
#      computed by the sender and checked by the receiver, RC ACKs, credits; the wire carries the
#      RS(8+2) FEC codeword's length, but with the default BER 0 the PHY is skipped: there is no
#      error to correct, so the codec would be the identity), ~234k data packets.
#   3. weft sim: 1,024-HCA all-to-all (fat-tree:k=16), 4 KiB messages, bounded virtual time,
#      each HCA to the next 16 (A2A_FANOUT; a full all-to-all is 1M RC QPs: >13 GB here).
# Figures: data packets delivered per second on one core (taskset -c $CPU), medians of RUNS
# runs interleaved (ns-3, weft, ns-3, ...), and the ratio to ns-3's packets per second, twice:
#   wall  packets / wall-clock second of the simulation loop (ns-3's own figure; weft run.wall_s)
#   CPU   packets / CPU second of the process: on a shared machine the wall clock also counts
#         the time spent waiting for the core, which swings by 2-5x from run to run; CPU time is
#         what the run takes on a core of its own. weft: run.cpu_s (the simulation loop); ns-3:
#         user+sys of the process less that of a 1-packet run (its setup).
# usage: bench/sim/sim_speed.sh [BUILD_DIR] [RUNS]      (needs libns3-dev; installs it if absent)
#   WEFT=path  another weft binary (e.g. an older build, for a before/after in one session)
#   A2A=0      skip the 1,024-HCA all-to-all
set -eu
build=${1:-build}
runs=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
weft=${WEFT:-$build/tools/weft/weft}
anchors=${ANCHORS:-/work/shared/tools/anchors}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$weft" ] || { echo "build $weft first (ninja -C $build tools/weft/weft)"; exit 1; }
dpkg -s libns3-dev >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y libns3-dev >/dev/null
bash "$anchors/build_ns3_bench.sh" "$tmp" >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
pin="taskset -c ${CPU:-0}"
command -v taskset >/dev/null || pin=""

# CPU seconds (user + sys) of a command, its stdout kept in $tmp/out.
cpu_of() {
  /usr/bin/time -f '%U %S' -o "$tmp/time" "$@" >"$tmp/out"
  awk '{print $1 + $2}' "$tmp/time"
}
ns3_setup=$(cpu_of $pin "$tmp/ns3_bench" p2p 1 1024)
ns3=()
ns3c=()
weft2=()
weft2c=()
for i in $(seq "$runs"); do
  c=$(cpu_of $pin "$tmp/ns3_bench" p2p 300000 1024)
  ns3+=("$(sed -n 's/.* \([0-9.]*\) Mpkts\/s simulated.*/\1/p' "$tmp/out")")
  ns3c+=("$(awk -v c="$c" -v s="$ns3_setup" '{print 300000 / (c - s) / 1e6}' "$tmp/out")")
  $pin "$weft" sim --topology mesh:dims=1,hosts=2 \
      --workload pairs:flows=0:1,op=write,size=64K,mtu=1024,depth=8 --duration 8ms --json 2>/dev/null >"$tmp/w.json"
  weft2+=("$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["run"]; print(r["data_packets"] / r["wall_s"] / 1e6)' "$tmp/w.json")")
  weft2c+=("$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["run"]; print(r["data_packets"] / r["cpu_s"] / 1e6)' "$tmp/w.json")")
done
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["run"]; print("weft run: %d data packets, %d events (%.2f per data packet)" % (r["data_packets"], r["events"], r["events"] / r["data_packets"]))' "$tmp/w.json"
ns3_m=$(printf '%s\n' "${ns3[@]}" | median)
ns3c_m=$(printf '%s\n' "${ns3c[@]}" | median)
weft2_m=$(printf '%s\n' "${weft2[@]}" | median)
weft2c_m=$(printf '%s\n' "${weft2c[@]}" | median)
echo "ns-3 p2p UDP 1 KiB, wall:         ${ns3_m} M pkt/s   (runs: ${ns3[*]})"
echo "weft two-HCA WRITE 1 KiB, wall:   ${weft2_m} M pkt/s   (runs: ${weft2[*]})"
awk -v w="$weft2_m" -v n="$ns3_m" 'BEGIN {printf "ratio weft/ns-3, wall:            %.2fx\n", w / n}'
echo "ns-3 p2p UDP 1 KiB, CPU:          ${ns3c_m} M pkt/s   (runs: ${ns3c[*]})"
echo "weft two-HCA WRITE 1 KiB, CPU:    ${weft2c_m} M pkt/s   (runs: ${weft2c[*]})"
awk -v w="$weft2c_m" -v n="$ns3c_m" 'BEGIN {printf "ratio weft/ns-3, CPU (goal >= 10): %.2fx\n", w / n}'
[ "${A2A:-1}" = 0 ] && exit 0

a2a=$($pin "$weft" sim --topology fat-tree:k=16 --workload all-to-all:size=4K,mtu=4096,depth=1,fanout=${A2A_FANOUT:-16} \
    --duration ${A2A_DURATION:-5us} --json 2>/dev/null |
  python3 -c 'import json,sys; j=json.load(sys.stdin); r=j["run"]; print("%d HCAs, %d data packets, %.1f s wall, %.1f s CPU, %.3f M pkt/s per CPU s, %d events, SM %.2f s wall" % (j["topology"]["hcas"], r["data_packets"], r["wall_s"], r["cpu_s"], r["data_packets"] / r["cpu_s"] / 1e6, r["events"], j["sm"]["wall_s"]))')
echo "weft 1,024-HCA all-to-all (fanout 16):$a2a"
awk -v a="$(echo "$a2a" | sed -n 's/.* \([0-9.]*\) M pkt\/s per CPU s.*/\1/p')" -v n="$ns3c_m" 'BEGIN {printf "ratio all-to-all/ns-3 p2p, CPU:   %.2fx\n", a / n}'
