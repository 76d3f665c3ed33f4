#!/bin/bash
# Runs Debian's real fi_pingpong (libfabric-bin) as server and client, two processes, over the
# weft provider (FI_WEFT_MEDIUM, default shm). Usage: fi_pingpong_test.sh FI_PINGPONG [fi_pingpong args]
# e.g. `-e rdm -S all -I 5 -c`. FI_PROVIDER_PATH must name the directory of libweft-fi.so.
# Passes when both processes exit 0 and the client printed its result table. Every process is
# bounded by `timeout` and killed on the way out; nothing stays behind.
set -u
pp=$1
shift
export FI_WEFT_MEDIUM=${FI_WEFT_MEDIUM:-shm}
# shellcheck source=pingpong_pair.sh
source "$(dirname "$0")/pingpong_pair.sh"  # $dir, $server and the clean-up on exit
fail() {
  echo "FAIL: $*"
  echo "--- server"; cat "$dir/server" 2>/dev/null
  echo "--- client"; cat "$dir/client" 2>/dev/null
  exit 1
}

for attempt in 1 2 3; do
  # FI_WEFT_MEDIUM=dpdk: the two processes pair over net_memif under a name of this run's own.
  export FI_WEFT_DPDK_MEMIF=weft-pp-$$-$attempt
  run_pingpong_pair "$pp" "$@" || continue
  [ "$crc" -eq 0 ] || fail "client exit $crc"
  [ "$src" -eq 0 ] || fail "server exit $src"
  grep -q "usec/xfer" "$dir/client" || fail "no result table from the client"
  grep -q "usec/xfer" "$dir/server" || fail "no result table from the server"
  cat "$dir/client"
  echo "PASS: fi_pingpong -p weft $*"
  exit 0
done
fail "no free port"
