#!/bin/bash
# FI_WEFT_PCAP end to end: runs a command (fi_pingpong_test.sh, or `weft run ... --pcap`) with the
# captures going to a directory of this test's own, then checks them:
#   - at least MIN_FILES files (one per process: the provider names them cap.<pid>.pcap, weft run
#     cap.<rank>.<pid>.pcap), each parsed byte for byte by CAPTURE_CHECK (Weft's parsers: RoCEv2
#     frames with their ICRC, or IBA packets with ICRC and VCRC);
#   - tshark (when installed) decodes every record as InfiniBand (RoCE for Ethernet captures),
#     finds nothing malformed and reports no error.
# Usage: pcap_test.sh CAPTURE_CHECK MIN_FILES MODE -- COMMAND...
#   MODE env: FI_WEFT_PCAP is set to DIR/cap.pcap; MODE arg: "--pcap DIR/cap.pcap" is appended
#   to COMMAND's first word list up to its "--" (for weft run).
# The directory is removed on the way out.
set -u
check=$1 min=$2 mode=$3
shift 4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The udp medium: an address of this test's own, where a capturing process can take UDP 4791
# (RoCEv2's port, which Wireshark decodes as RoCE) whatever else uses 127.0.0.1.
export FI_WEFT_UDP_IP=${FI_WEFT_UDP_IP:-127.$((1 + $$ % 250)).$((1 + RANDOM % 250)).8}
if [ "$mode" = env ]; then
  FI_WEFT_PCAP=$dir/cap.pcap "$@"
  rc=$?
else
  # weft run -n 2 --medium M [--pcap FILE] -- prog...: insert --pcap before the "--".
  cmd=()
  inserted=
  for a in "$@"; do
    if [ "$a" = "--" ] && [ -z "$inserted" ]; then cmd+=(--pcap "$dir/cap.pcap"); inserted=1; fi
    cmd+=("$a")
  done
  "${cmd[@]}"
  rc=$?
fi
[ "$rc" -eq 0 ] || { echo "FAIL: the command exited $rc"; exit 1; }
files=("$dir"/cap.*pcap)
[ -e "${files[0]}" ] || { echo "FAIL: no capture in $dir"; ls -la "$dir"; exit 1; }
echo "captures: ${files[*]}"
[ "${#files[@]}" -ge "$min" ] || { echo "FAIL: ${#files[@]} captures, expected $min"; exit 1; }
"$check" "${files[@]}" || { echo "FAIL: a capture does not parse"; exit 1; }
if ! command -v tshark >/dev/null 2>&1; then
  echo "PASS (tshark not installed: only Weft's parsers read the captures)"
  exit 0
fi
# Upper-layer heuristics over IB payloads would misread fi_pingpong's bytes (pcap_test.cpp).
heur=$(tshark -G heuristic-decodes 2>/dev/null |
       awk '$1 == "infiniband.payload" { printf " --disable-protocol %s", $2 }')
for f in "${files[@]}"; do
  total=$(tshark -n $heur -r "$f" -T fields -e frame.number 2>/dev/null | wc -l)
  ib=$(tshark -n $heur -r "$f" -Y infiniband -T fields -e frame.number 2>/dev/null | wc -l)
  bad=$(tshark -n $heur -r "$f" -Y '_ws.malformed || _ws.expert.severity >= error' 2>/dev/null)
  echo "$f: tshark $total frames, $ib InfiniBand"
  [ "$total" -gt 0 ] && [ "$ib" -eq "$total" ] || { echo "FAIL: not all InfiniBand in $f"; exit 1; }
  [ -z "$bad" ] || { echo "FAIL: tshark finds errors in $f:"; echo "$bad" | head; exit 1; }
  if [ "$(tshark -r "$f" -T fields -e frame.protocols -c 1 2>/dev/null | grep -c eth)" = 1 ]; then
    roce=$(tshark -n $heur -r "$f" -Y 'udp.port == 4791 && infiniband' -T fields \
           -e frame.number 2>/dev/null | wc -l)
    [ "$roce" -eq "$total" ] || { echo "FAIL: not all RoCEv2 (UDP 4791 at one end) in $f"; exit 1; }
  fi
done
echo "PASS"
