// tests/common/ofi_endpoint.hpp — one endpoint of the weft libfabric provider with its own
// fabric, domain, table AV and one CQ for both directions: fi_getinfo through fi_enable, as the
// provider tests that are not about the set-up itself open it (they differ in the endpoint type,
// caps, mr_mode and the CQ's format and wait object). Errors are returned, not asserted, so
// that forked ranks (their CHECK macros) and gtest tests (ASSERT_EQ) report them their way.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstdint>
#include <cstring>
#include <functional>

namespace weft::test_util {

struct OfiEndpointSpec {
  fi_ep_type type = FI_EP_RDM;
  std::uint64_t caps = FI_MSG;
  int mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
  fi_cq_format cq_format = FI_CQ_FORMAT_CONTEXT;
  fi_wait_obj cq_wait = FI_WAIT_UNSPEC;
};

struct OfiEndpoint {
  fi_info* info = nullptr;  // fi_getinfo's answer: the fabric, domain and ep are opened from it
  fid_fabric* fab = nullptr;
  fid_domain* dom = nullptr;
  fid_av* av = nullptr;  // FI_AV_TABLE: fi_addr_t i is the i-th address inserted
  fid_cq* cq = nullptr;  // bound for FI_TRANSMIT | FI_RECV
  fid_ep* ep = nullptr;
  const char* failed = "";  // the call that returned the error open_* returned

  // fi_getinfo (provider weft, API 1.17) from the spec, the fabric, the domain and an
  // FI_AV_TABLE. 0, or the first negative return (its call in `failed`).
  int open_domain(const OfiEndpointSpec& s) {
    fi_info* h = fi_allocinfo();
    if (!h) return fail("fi_allocinfo", -FI_ENOMEM);
    h->ep_attr->type = s.type;
    h->caps = s.caps;
    h->fabric_attr->prov_name = strdup("weft");
    h->domain_attr->mr_mode = s.mr_mode;
    const int r = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info);
    fi_freeinfo(h);
    if (r < 0) return fail("fi_getinfo", r);
    if (const int e = fi_fabric(info->fabric_attr, &fab, nullptr); e < 0)
      return fail("fi_fabric", e);
    if (const int e = fi_domain(fab, info, &dom, nullptr); e < 0) return fail("fi_domain", e);
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    if (const int e = fi_av_open(dom, &aa, &av, nullptr); e < 0) return fail("fi_av_open", e);
    return 0;
  }
  // The CQ (the spec's format and wait object, or `cq_attr`), the endpoint bound to the AV and
  // to the CQ for FI_TRANSMIT | FI_RECV, then `before_enable` (more binds: a counter), then
  // fi_enable. 0, or the first negative return.
  int open_endpoint(const OfiEndpointSpec& s, const fi_cq_attr* cq_attr = nullptr,
                    const std::function<int()>& before_enable = {}) {
    fi_cq_attr ca{};
    ca.format = s.cq_format;
    ca.wait_obj = s.cq_wait;
    if (const int e =
            fi_cq_open(dom, cq_attr ? const_cast<fi_cq_attr*>(cq_attr) : &ca, &cq, nullptr);
        e < 0)
      return fail("fi_cq_open", e);
    if (const int e = fi_endpoint(dom, info, &ep, nullptr); e < 0) return fail("fi_endpoint", e);
    if (const int e = fi_ep_bind(ep, &av->fid, 0); e < 0) return fail("fi_ep_bind(av)", e);
    if (const int e = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV); e < 0)
      return fail("fi_ep_bind(cq)", e);
    if (before_enable)
      if (const int e = before_enable(); e < 0) return fail("before fi_enable", e);
    if (const int e = fi_enable(ep); e < 0) return fail("fi_enable", e);
    return 0;
  }
  int open(const OfiEndpointSpec& s) {
    const int r = open_domain(s);
    return r < 0 ? r : open_endpoint(s);
  }
  // Closes what is open, the endpoint first (what else a test opened on the domain is the
  // test's to close before). 0, or the first fi_close that failed.
  int close() {
    int rc = 0;
    for (fid* f : {ep ? &ep->fid : nullptr, cq ? &cq->fid : nullptr, av ? &av->fid : nullptr,
                   dom ? &dom->fid : nullptr, fab ? &fab->fid : nullptr})
      if (f)
        if (const int e = fi_close(f); e != 0 && rc == 0) rc = e;
    fi_freeinfo(info);
    *this = OfiEndpoint{};
    return rc;
  }

 private:
  int fail(const char* what, int rc) {
    failed = what;
    return rc;
  }
};

}  // namespace weft::test_util
