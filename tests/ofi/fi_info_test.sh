#!/bin/sh
# fi_info (libfabric-bin) finds the provider through FI_PROVIDER_PATH, lists its RDM, MSG and DGRAM
# endpoints and its FI_WEFT_* parameters. Usage: fi_info_test.sh /path/to/fi_info
set -eu
FI_INFO=$1
out=$("$FI_INFO" -p weft)
echo "$out"
echo "$out" | grep -q '^provider: weft' || { echo "FAIL: provider weft not listed"; exit 1; }
echo "$out" | grep -q 'type: FI_EP_RDM' || { echo "FAIL: no FI_EP_RDM"; exit 1; }
echo "$out" | grep -q 'type: FI_EP_DGRAM' || { echo "FAIL: no FI_EP_DGRAM"; exit 1; }
verbose=$("$FI_INFO" -p weft -v)
echo "$verbose" | grep -q 'mem_tag_format: 0xa' || { echo "FAIL: mem_tag_format bit 63"; exit 1; }
echo "$verbose" | grep -q 'cq_data_size: 4' || { echo "FAIL: cq_data_size"; exit 1; }
params=$("$FI_INFO" -p weft -e | tr -d '\000')
for p in FI_WEFT_EAGER_SIZE FI_WEFT_INJECT_SIZE FI_WEFT_RX_SIZE FI_WEFT_TX_SIZE FI_WEFT_MTU FI_WEFT_ACK_TIMEOUT FI_WEFT_KEEPER_MS \
         FI_WEFT_MEDIUM FI_WEFT_DPDK_ARGS FI_WEFT_DPDK_VDEV FI_WEFT_DPDK_MEMIF FI_WEFT_PCAP; do
  echo "$params" | grep -q "$p" || { echo "FAIL: parameter $p not listed"; exit 1; }
done
echo "$out" | grep -q 'type: FI_EP_MSG' || { echo "FAIL: no FI_EP_MSG"; exit 1; }
# A hint we cannot honour (tagged MSG endpoints) lists nothing.
if "$FI_INFO" -p weft -t FI_EP_MSG -c FI_TAGGED >/dev/null 2>&1; then
  echo "FAIL: tagged FI_EP_MSG offered"; exit 1
fi
# FI_WEFT_MEDIUM=dpdk in a build without DPDK: getinfo says why and lists nothing.
if [ "${WEFT_HAVE_DPDK:-1}" = 0 ]; then
  if FI_WEFT_MEDIUM=dpdk "$FI_INFO" -p weft >/dev/null 2>&1; then
    echo "FAIL: FI_WEFT_MEDIUM=dpdk offered without DPDK"; exit 1
  fi
  FI_WEFT_MEDIUM=dpdk FI_LOG_LEVEL=warn "$FI_INFO" -p weft 2>&1 | grep -q "built without DPDK" ||
    { echo "FAIL: no warning that DPDK is not built"; exit 1; }
fi
echo "fi_info: ok"
