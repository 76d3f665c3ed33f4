#!/bin/bash
# bench/sim/sim_speed.sh — simulation speed of `weft sim` against ns-3, measured side by side.
#   1. ns-3 (Debian libns3-dev): ns3_bench p2p 300000 1024 — two nodes, 1 KiB UDP packets.
#   2. weft sim: two HCAs on one switch, one RDMA WRITE stream (64 KiB messages, 8 deep),
#      1 KiB MTU, default configuration (verified mode: ICRC/VCRC computed and checked, RS FEC
#      encode/decode of every codeword's size on the wire, ACKs), ~300k data packets.
#   3. weft sim: 1,024-HCA all-to-all (fat-tree:k=16), 4 KiB messages, bounded virtual time,
#      each HCA to the next 16 (A2A_FANOUT; a full all-to-all is 1M RC QPs: >13 GB here).
# Figures: data packets delivered per wall second on one core (taskset -c 0), medians of
# RUNS runs, and the ratio to ns-3's packets per second.
# usage: bench/sim/sim_speed.sh [BUILD_DIR] [RUNS]      (needs libns3-dev; installs it if absent)
set -eu
build=${1:-build}
runs=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
weft="$build/tools/weft/weft"
anchors=${ANCHORS:-/work/shared/tools/anchors}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$weft" ] || { echo "build $weft first (ninja -C $build tools/weft/weft)"; exit 1; }
dpkg -s libns3-dev >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y libns3-dev >/dev/null
bash "$anchors/build_ns3_bench.sh" "$tmp" >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
pin="taskset -c 0"
command -v taskset >/dev/null || pin=""

ns3=()
weft2=()
for i in $(seq "$runs"); do
  ns3+=("$($pin "$tmp/ns3_bench" p2p 300000 1024 | sed -n 's/.* \([0-9.]*\) Mpkts\/s simulated.*/\1/p')")
  weft2+=("$($pin "$weft" sim --topology mesh:dims=1,hosts=2 \
      --workload pairs:flows=0:1,op=write,size=64K,mtu=1024,depth=8 --duration 8ms --json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["run"]["data_packets"] / j["run"]["wall_s"] / 1e6)')")
done
ns3_m=$(printf '%s\n' "${ns3[@]}" | median)
weft2_m=$(printf '%s\n' "${weft2[@]}" | median)
echo "ns-3 p2p UDP 1 KiB:               ${ns3_m} M pkt/s   (runs: ${ns3[*]})"
echo "weft two-HCA WRITE, 1 KiB MTU:    ${weft2_m} M pkt/s   (runs: ${weft2[*]})"
awk -v w="$weft2_m" -v n="$ns3_m" 'BEGIN {printf "ratio weft/ns-3 (goal >= 10):     %.2fx\n", w / n}'

a2a=$($pin "$weft" sim --topology fat-tree:k=16 --workload all-to-all:size=4K,mtu=4096,depth=1,fanout=${A2A_FANOUT:-16} \
    --duration ${A2A_DURATION:-5us} --json 2>/dev/null |
  python3 -c 'import json,sys; j=json.load(sys.stdin); r=j["run"]; print("%d HCAs, %d data packets, %.1f s wall, %.3f M pkt/s, %d events, SM %.2f s wall" % (j["topology"]["hcas"], r["data_packets"], r["wall_s"], r["data_packets"] / r["wall_s"] / 1e6, r["events"], j["sm"]["wall_s"]))')
echo "weft 1,024-HCA all-to-all (fanout 16):$a2a"
awk -v a="$(echo "$a2a" | sed -n 's/.* \([0-9.]*\) M pkt\/s.*/\1/p')" -v n="$ns3_m" 'BEGIN {printf "ratio all-to-all/ns-3 p2p:        %.2fx\n", a / n}'
