# Sourced by the fi_pingpong tests (not run alone). run_pingpong_pair FI_PINGPONG ARGS... starts
# `FI_PINGPONG -p weft ARGS -B PORT` as the server on a random port and the client against it,
# the client retrying while the server's out-of-band port is not listening yet. Outputs go to
# $dir/server and $dir/client; sets `crc` and `src` to the two exit statuses and keeps `server`
# set while the server runs (the caller's cleanup kills it). Returns 1 when the port was taken
# (the caller tries another), 0 otherwise. Sourcing it makes the scratch directory $dir and a
# trap that, on exit, kills a server still running and removes $dir.
dir=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

run_pingpong_pair() {
  local pp=$1
  shift
  local port=$((20000 + (RANDOM * 7 + $$) % 40000))
  timeout 60 "$pp" -p weft "$@" -B "$port" >"$dir/server" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    timeout 60 "$pp" -p weft "$@" -P "$port" 127.0.0.1 >"$dir/client" 2>&1
    crc=$?
    grep -q "Connection refused" "$dir/client" || break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  if grep -q "Address already in use" "$dir/server"; then
    wait "$server"
    server=
    return 1
  fi
  wait "$server"
  src=$?
  server=
  return 0
}
