// emu/topo/netfile.hpp — read and write ibnetdiscover / ibsim topology ("net") files.
//
// The format (ibnetdiscover(8) output, which ibsim reads as its net file): one block per node,
//   vendid=0x2c9                       optional attribute lines for the next node
//   devid=0xd2f0
//   sysimgguid=0x0002c90100000000
//   switchguid=0x0002c90100000000(2c90100000000)     (caguid=0x... for a CA)
//   Switch  36 "S-0002c90100000000"  # "leaf000" enhanced port 0 lid 0 lmc 0
//   [1]  "H-0002c90200000000"[1](2c90200000001)   # "hca00000" lid 0 4xNDR
//   Ca  1 "H-0002c90200000000"  # "hca00000"
//   [1](2c90200000001)  "S-0002c90100000000"[1]   # lid 0 lmc 0 "leaf000" lid 0 4xNDR
// `Hca` is accepted for `Ca` (ibsim, gen_fattree.py). Both ends of every link are listed.
// Without GUID lines a node's GUID comes from an "S-<16 hex>"/"H-<16 hex>" id, or else is
// assigned in file order (make_guid(kind, index)); without a `# "desc"` the description is the
// id. Width and speed come from a token like 4xHDR in a port line's comment (default 4x NDR).
// Two Weft extensions live inside comments, so ibnetdiscover and ibsim ignore them:
// `length_m=<metres>` in a port line's comment, and lines
//   #weft nvlink "<domain name>" "<node id>" "<node id>" ...
// Limitations: descriptions containing '"' are not representable; routers (Rt) are refused.
//
// Reading never crashes on bad input: it returns ParseError with the 1-based line number and
// the problem: a malformed line, a port number out of range, a port listed twice, a link to a
// node that does not exist, a dangling link (the other side does not list it back, or lists
// something else), a self-link, a duplicate node id or GUID.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "emu/topo/topology.hpp"

namespace weft::topo {

struct ParseError {
  int line = 0;  // 1-based; 0 = the file as a whole
  std::string message;
  std::string to_string() const { return "line " + std::to_string(line) + ": " + message; }
};

Result<Topology, ParseError> read_netfile(std::string_view text);
Result<Topology, ParseError> read_netfile_path(const std::string& path);

std::string write_netfile(const Topology& topo);

}  // namespace weft::topo
