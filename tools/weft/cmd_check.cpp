// placeholder until the harness work lands
#include "tools/weft/commands.hpp"
namespace weft::cli {
void add_check(CLI::App& app) { app.add_subcommand("check", "Seeded fault campaign"); }
}  // namespace weft::cli
