#!/bin/bash
# One rank of `weft run -n 2 --medium M -- weft_run_pingpong.sh FI_PINGPONG [args]`: rank 0 is
# fi_pingpong's server, rank 1 its client (retrying while the server is not listening yet), on an
# out-of-band TCP port derived from weft run's pid (their parent). A port something else holds
# (fi_pingpong exits 98, EADDRINUSE: another test's listener or connection) moves the server to
# the next candidate; once it listens, rank 0 writes its port into a file named after weft run's
# pid, which the client reads before each try. The medium comes from weft run
# (FI_WEFT_MEDIUM); every process is bounded by `timeout`.
set -u
pp=$1
shift
portfile=${TMPDIR:-/tmp}/weft-run-pingpong.$PPID
if [ "$WEFT_RANK" = 0 ]; then
  trap 'rm -f "$portfile" "$portfile.new"' EXIT
  rc=98
  for i in 0 1 2 3 4 5 6 7; do
    port=$((20000 + (PPID + i * 4099) % 40000))
    timeout 60 "$pp" -p weft "$@" -B "$port" &
    pid=$!
    # A taken port fails the bind at once; a server still there after 0.3 s listens, and only
    # then does the client learn the port.
    for _ in 1 2 3; do
      sleep 0.1
      kill -0 "$pid" 2>/dev/null || break
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$port" >"$portfile.new" && mv "$portfile.new" "$portfile"
    fi
    wait "$pid"
    rc=$?
    [ "$rc" -eq 98 ] || break
    echo "rank 0: port $port is taken, trying another"
  done
  exit "$rc"
fi
out="rank 1: rank 0 never named its port"
rc=1
for _ in $(seq 1 100); do
  if port=$(cat "$portfile" 2>/dev/null) && [ -n "$port" ]; then
    out=$(timeout 60 "$pp" -p weft "$@" -P "$port" 127.0.0.1 2>&1)
    rc=$?
    echo "$out" | grep -q "Connection refused" || break
  fi
  sleep 0.1
done
echo "$out"
[ "$rc" -eq 0 ] && echo "$out" | grep -q "usec/xfer" && echo "rank 1 ($FI_WEFT_MEDIUM): PASS"
exit "$rc"
