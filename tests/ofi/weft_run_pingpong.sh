#!/bin/bash
# One rank of `weft run -n 2 --medium M -- weft_run_pingpong.sh FI_PINGPONG [args]`: rank 0 is
# fi_pingpong's server, rank 1 its client (retrying while the server is not listening yet), on an
# out-of-band port both derive from weft run's pid (their parent). The medium comes from weft run
# (FI_WEFT_MEDIUM); every process is bounded by `timeout`.
set -u
pp=$1
shift
port=$((20000 + PPID % 40000))
if [ "$WEFT_RANK" = 0 ]; then
  exec timeout 60 "$pp" -p weft "$@" -B "$port"
fi
for _ in $(seq 1 100); do
  out=$(timeout 60 "$pp" -p weft "$@" -P "$port" 127.0.0.1 2>&1)
  rc=$?
  echo "$out" | grep -q "Connection refused" || break
  sleep 0.1
done
echo "$out"
[ "$rc" -eq 0 ] && echo "$out" | grep -q "usec/xfer" && echo "rank 1 ($FI_WEFT_MEDIUM): PASS"
exit "$rc"
