#!/bin/bash
# The shm link's set-up happens in fi_av_insert, not in the first messages (src/ofi/README.md,
# "Link set-up before use"): fi_pingpong -p weft, one iteration of 64 KiB with data checks, both
# processes at FI_LOG_LEVEL=info. Passes when, in each process, fi_av_insert reports its eager
# connection answered before it returned ("connections settled: 0 pending") and every shm link
# touched its rings' pages while being set up (ShmMedium::prefault_rings: the connector its tx
# and rx rings, 2 x 1024 pages of 4 KiB for the 4 MiB rings; an accepted link at least its rx
# ring). Before, the first ~64 messages of 64 KiB each paid the hypervisor's first touch of 16
# ring pages (~100 us). Usage: link_setup_test.sh FI_PINGPONG; FI_PROVIDER_PATH names
# libweft-fi.so's directory. Every process is bounded by `timeout`; nothing stays behind.
set -u
pp=$1
export FI_WEFT_MEDIUM=shm FI_LOG_LEVEL=info
# shellcheck source=pingpong_pair.sh
source "$(dirname "$0")/pingpong_pair.sh"  # $dir, $server and the clean-up on exit
fail() {
  echo "FAIL: $*"
  echo "--- server"; grep -v '^libfabric:.*core' "$dir/server" 2>/dev/null | tail -40
  echo "--- client"; grep -v '^libfabric:.*core' "$dir/client" 2>/dev/null | tail -40
  exit 1
}

pages_per_ring=$((4 * 1024 * 1024 / 4096))
for attempt in 1 2 3; do
  run_pingpong_pair "$pp" -e rdm -S 65536 -I 1 -c || continue
  [ "$crc" -eq 0 ] || fail "client exit $crc"
  [ "$src" -eq 0 ] || fail "server exit $src"
  for side in server client; do
    f=$dir/$side
    grep -q "usec/xfer" "$f" || fail "$side: no result table"
    grep -q "connections settled: 0 pending" "$f" ||
      fail "$side: fi_av_insert returned before its connection was answered"
    # One line per link at close: "... | prefaulted pages N".
    counts=$(grep -o 'prefaulted pages [0-9]*' "$f" | awk '{print $3}')
    [ -n "$counts" ] || fail "$side: no shm link reported"
    max=0
    for n in $counts; do
      [ "$n" -ge "$pages_per_ring" ] || fail "$side: a link touched $n pages (< $pages_per_ring)"
      [ "$n" -gt "$max" ] && max=$n
    done
    [ "$max" -eq $((2 * pages_per_ring)) ] ||
      fail "$side: no link touched both rings ($((2 * pages_per_ring)) pages; most: $max)"
  done
  echo "PASS: link set-up in fi_av_insert, rings touched: $(grep -h -o 'connections settled.*' "$dir/server" "$dir/client" | tr '\n' ';')"
  exit 0
done
fail "no free port"
