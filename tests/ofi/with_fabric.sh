#!/bin/bash
# Runs a command through an emulated fabric: starts `weft fabric up` (leaf-spine, 2 leaves,
# 1 spine, HOSTS hosts per leaf), optionally with DROP (e.g. 0.01) on the receive side of every
# HCA's port (each packet meets exactly one such drop point on its way), waits until the daemon says it
# is up, runs the command with WEFT_FABRIC and FI_WEFT_MEDIUM=fabric, checks that the fabric
# carried traffic (and dropped some when DROP > 0), and stops the daemon.
# Usage: with_fabric.sh WEFT HOSTS DROP -- COMMAND [ARGS...]
set -u
weft=$1 hosts=$2 drop=$3
shift 3
[ "${1:-}" = "--" ] && shift
name="ofi-$$-$RANDOM"
dir=$(mktemp -d)
daemon=
cleanup() {
  if [ -n "$daemon" ]; then
    "$weft" fabric down "$name" >/dev/null 2>&1 || kill "$daemon" 2>/dev/null
    wait "$daemon" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
faults=()
if [ "$drop" != "0" ]; then
  for ((i = 0; i < 2 * hosts; i++)); do
    printf '[[fault]]\nport = "hca%05d/p1"\ndrop = %s\n' "$i" "$drop"
  done >"$dir/faults.toml"
  faults=(--faults "$dir/faults.toml")
fi
"$weft" fabric up --name "$name" --topology "leaf-spine:leaves=2,spines=1,hosts=$hosts" \
  "${faults[@]}" >"$dir/daemon" 2>&1 &
daemon=$!
for _ in $(seq 1 200); do
  grep -q "^fabric $name up" "$dir/daemon" && break
  kill -0 "$daemon" 2>/dev/null || break
  sleep 0.05
done
grep -q "^fabric $name up" "$dir/daemon" || { echo "FAIL: the fabric did not come up"; cat "$dir/daemon"; exit 1; }
WEFT_FABRIC=$name FI_WEFT_MEDIUM=fabric "$@"
rc=$?
[ "$rc" -eq 77 ] && exit 77  # the command skipped (e.g. no mpirun)
"$weft" fabric status "$name" >"$dir/status" 2>&1
sent=$(awk '/^node .* hca / {for (i = 1; i < NF; i++) if ($i == "to_fabric") s += $(i + 1)} END {print s + 0}' "$dir/status")
dropped=$(awk '/fault_dropped/ {for (i = 1; i < NF; i++) if ($i == "fault_dropped") s += $(i + 1)} END {print s + 0}' "$dir/status")
echo "fabric $name: $sent packets from the processes into the fabric, $dropped dropped by faults"
[ "$rc" -eq 0 ] || { echo "FAIL: the command exited $rc"; exit 1; }
[ "$sent" -gt 0 ] || { echo "FAIL: nothing crossed the fabric"; exit 1; }
if [ "$drop" != "0" ] && [ "$dropped" -eq 0 ]; then echo "FAIL: no packet was dropped"; exit 1; fi
echo "PASS: through fabric $name (drop $drop at each HCA port)"
