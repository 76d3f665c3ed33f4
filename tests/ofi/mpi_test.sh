#!/bin/bash
# Runs an MPI program unchanged on Weft: Open MPI (openmpi-bin) with the OFI MTL and the provider
# `weft` (FI_PROVIDER_PATH names the directory of libweft-fi.so), over FI_WEFT_MEDIUM (default shm).
# Usage: mpi_test.sh MPIRUN PROGRAM NRANKS
# Exit 77 (skipped) only when mpirun is absent. Bounded by `timeout`; Open MPI's session
# directory lives in a temporary TMPDIR that is removed on the way out.
set -u
mpirun=$1
prog=$2
np=$3
if [ -z "$mpirun" ] || ! [ -x "$mpirun" ]; then
  echo "SKIP: mpirun not found (install openmpi-bin and libopenmpi-dev)"
  exit 77
fi
if [ "$prog" = "none" ]; then
  echo "FAIL: mpirun is there but the MPI program was not built: install libopenmpi-dev and reconfigure"
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export TMPDIR=$dir FI_WEFT_MEDIUM=${FI_WEFT_MEDIUM:-shm}
# pml cm + mtl ofi: a provider failure is loud, not a silent fall-back to ob1.
# btl self only for point-to-point: the cm PML does not use the BTLs.
timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np "$np" \
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include weft \
  --mca btl self --mca oob_tcp_if_include lo --mca mtl_base_verbose 100 \
  "$prog" >"$dir/out" 2>&1
rc=$?
grep -v 'mca:base:select\|select: init' "$dir/out" | tail -40
[ "$rc" -eq 0 ] || { echo "FAIL: mpirun exit $rc"; exit 1; }
n=$(grep -c 'mtl:ofi:provider: weft' "$dir/out")
[ "$n" -eq "$np" ] || { echo "FAIL: $n of $np ranks chose provider weft"; exit 1; }
grep -q "mpi_test: PASS on $np ranks" "$dir/out" || { echo "FAIL: no PASS line"; exit 1; }
echo "PASS: $np ranks, Open MPI OFI MTL on provider weft"
