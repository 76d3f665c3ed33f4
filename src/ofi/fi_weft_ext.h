/* src/ofi/fi_weft_ext.h — the weft provider's extension ops (fi_open_ops on a domain), as
 * libfabric providers offer theirs (fi_open_ops(3): "provider-specific interfaces"). C, so any
 * libfabric application may include it.
 *
 *   struct fi_weft_domain_ops* ops;
 *   fi_open_ops(&domain->fid, FI_WEFT_DOMAIN_OPS_1, 0, (void**)&ops, NULL);
 *   struct fi_weft_medium_stats s;
 *   ops->medium_stats(domain, &s);
 *
 * Thread-safety: medium_stats takes the domain's lock, like any progress call. */
#ifndef WEFT_OFI_FI_WEFT_EXT_H
#define WEFT_OFI_FI_WEFT_EXT_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_domain.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FI_WEFT_DOMAIN_OPS_1 "weft_domain_ops_1"

/* What the domain's medium counted so far (zeros where the medium counts nothing of the kind). */
struct fi_weft_medium_stats {
  uint64_t tx_packets, rx_packets;
  uint64_t tx_zero_copy; /* packets whose payload went by reference (DPDK external buffers) */
  uint64_t regions;      /* memory regions registered with the medium now (fi_mr_reg) */
};

struct fi_weft_domain_ops {
  size_t size; /* sizeof(struct fi_weft_domain_ops) */
  int (*medium_stats)(struct fid_domain* domain, struct fi_weft_medium_stats* out);
};

#ifdef __cplusplus
}
#endif

#endif /* WEFT_OFI_FI_WEFT_EXT_H */
