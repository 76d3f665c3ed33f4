// src/ofi/enosys.hpp — the "not supported" entries of the provider's ops tables, in one place.
//
// libfabric wants every ops table fully populated, with -FI_ENOSYS where a provider offers
// nothing; the tables of several fid classes (fabric, domain, MR, AV, CQ, counter, EQ, wait set,
// endpoint, passive endpoint) share these. `enosys<R, Args...>` covers any other signature.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstddef>
#include <cstdint>

namespace weft::ofi {

template <class R, class... Args>
R enosys(Args...) {
  return -FI_ENOSYS;
}

// struct fi_ops members.
inline int no_bind(fid*, fid*, std::uint64_t) {
  return -FI_ENOSYS;
}
inline int no_control(fid*, int, void*) {
  return -FI_ENOSYS;
}
inline int no_ops_open(fid*, const char*, std::uint64_t, void**, void*) {
  return -FI_ENOSYS;
}
inline int no_tostr(const fid*, char*, std::size_t) {
  return -FI_ENOSYS;
}
inline int no_ops_set(fid*, const char*, std::uint64_t, void*, void*) {
  return -FI_ENOSYS;
}

}  // namespace weft::ofi
