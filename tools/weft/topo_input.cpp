// tools/weft/topo_input.cpp — see topo_input.hpp.
#include "tools/weft/topo_input.hpp"

#include <sys/stat.h>

#include <cstdio>

#include "emu/topo/netfile.hpp"
#include "emu/topo/spec.hpp"
#include "tools/weft/commands.hpp"

namespace weft::cli {

void input_error(const std::string& cmd, const std::string& msg) {
  std::fprintf(stderr, "weft %s: %s\n", cmd.c_str(), msg.c_str());
  throw CLI::RuntimeError(2);
}

topo::Topology load_topology(const std::string& cmd, const std::string& what) {
  topo::Topology t;
  struct stat st {};
  if (stat(what.c_str(), &st) == 0) {
    auto r = topo::read_netfile_path(what);
    if (!r.ok()) input_error(cmd, what + ": " + r.error().to_string());
    t = std::move(r).value();
  } else {
    if (what.find(':') == std::string::npos && what.find('/') != std::string::npos)
      input_error(cmd, what + ": no such file");
    auto r = topo::from_spec(what);
    if (!r.ok()) input_error(cmd, what + ": " + r.error().message);
    t = std::move(r).value();
  }
  const auto problems = t.validate();
  if (!problems.empty()) input_error(cmd, what + ": " + problems.front());
  return t;
}

}  // namespace weft::cli
