/* src/ofi/fi_weft_ext.h — the weft provider's extension ops (fi_open_ops on a domain), as
 * libfabric providers offer theirs (fi_open_ops(3): "provider-specific interfaces"). C, so any
 * libfabric application may include it.
 *
 *   struct fi_weft_domain_ops* ops;
 *   fi_open_ops(&domain->fid, FI_WEFT_DOMAIN_OPS_1, 0, (void**)&ops, NULL);
 *   struct fi_weft_medium_stats s;
 *   ops->medium_stats(domain, &s);
 *   struct fi_weft_conn_stats c;
 *   ops->conn_stats(domain, &c);
 *
 * Thread-safety: each op takes the domain's lock, like any progress call. */
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

/* The domain's RDM connection set-up so far (src/ofi/README.md, "Connection set-up: resends and
 * deadline"). A connection is one direction between two endpoints: one QP at each end. */
struct fi_weft_conn_stats {
  uint64_t req_sent;        /* connection requests sent, resends included */
  uint64_t req_resent;      /* of which resends (no answer within the resend interval) */
  uint64_t req_received;    /* requests received, duplicates included */
  uint64_t req_duplicate;   /* of which resends of an answered request: answered again, no QP */
  uint64_t out_established; /* connections whose answer came (our QP ready) */
  uint64_t in_established;  /* connections a peer asked for (a QP made for each) */
  uint64_t timed_out;       /* requests (and fi_connect) given up after FI_WEFT_CONN_TIMEOUT_MS */
  uint64_t rejected;        /* requests answered "no such endpoint" */
  uint64_t stale_answers;   /* answers ignored: a second one, or one to a request given up */
  uint64_t ctrl_dropped;    /* requests and answers lost by FI_WEFT_CTRL_DROP_FIRST */
  uint64_t connecting;      /* requests (and fi_connect) awaiting an answer now */
};

struct fi_weft_domain_ops {
  size_t size; /* sizeof(struct fi_weft_domain_ops); conn_stats is there when size covers it */
  int (*medium_stats)(struct fid_domain* domain, struct fi_weft_medium_stats* out);
  int (*conn_stats)(struct fid_domain* domain, struct fi_weft_conn_stats* out);
};

#ifdef __cplusplus
}
#endif

#endif /* WEFT_OFI_FI_WEFT_EXT_H */
