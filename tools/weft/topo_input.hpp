// tools/weft/topo_input.hpp — how every weft subcommand takes a topology argument: a generator
// spec (emu/topo/spec.hpp, e.g. fat-tree:k=8) or, when it names an existing file, an
// ibnetdiscover/ibsim net file. Bad input is reported as "weft CMD: what: problem" (with the
// line number for net files) and exits 2.
#pragma once

#include <string>

#include "emu/topo/topology.hpp"

namespace weft::cli {

[[noreturn]] void input_error(const std::string& cmd, const std::string& msg);
// Also refuses a topology that fails Topology::validate(), naming the first problem.
topo::Topology load_topology(const std::string& cmd, const std::string& what);

}  // namespace weft::cli
