// placeholder until the harness work lands
#include "tools/weft/commands.hpp"
namespace weft::cli {
void add_demo(CLI::App& app) { app.add_subcommand("demo", "Two HCAs over a lossy link"); }
}  // namespace weft::cli
