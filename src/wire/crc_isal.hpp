// wire/crc_isal.hpp — ISA-L's reflected CRC-32 (crc32_gzip_refl) as src/wire calls it: the
// ICRC's bulk (IBA 7.8.1; RoCEv2's, Annex A17); and the clean-up every caller of an ISA-L
// kernel owes (src/wire, src/link's FEC). Not part of src/wire's interface for others.
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::wire::detail {

// crc32_gzip_refl(crc, p, n) (0 bytes: crc, whatever p is), and then the upper halves of the
// vector registers cleared (vzeroupper) on a CPU with AVX. Why: ISA-L 2.30's AVX-512 kernel
// (crc32_gzip_refl_by16_10, what it picks on a CPU with VPCLMULQDQ) returns without vzeroupper,
// so zmm0-15 stay dirty above bit 127, and until something clears them every legacy-SSE
// instruction that writes an xmm register also has to merge the dirty upper bits (Intel
// Optimization Manual, "Mixing AVX code with SSE code"). Weft is built for x86-64 without VEX and
// DPDK's net_memif copies frames with SSE (rte_memcpy: movdqu, palignr): on this session's Xeon a
// 4 KiB memif copy took 558 ticks after the kernel instead of 244, and the RoCEv2 ICRC of a
// 4 KiB frame (mostly SSE around two kernel calls) 510 instead of 192 (bench:
// src/io/dpdk/README.md).
std::uint32_t crc32_refl(std::uint32_t crc, const std::uint8_t* p, std::size_t n);

// vzeroupper on a CPU with AVX, nothing otherwise: call it after any other ISA-L kernel that may
// take its AVX-512 path (ec_encode_data, crc32_iscsi, ...), for the reason above.
void after_isal_kernel();

}  // namespace weft::wire::detail
