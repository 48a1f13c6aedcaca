#include "cli/commands.h"
namespace vdt::cli {
void add_bench(CLI::App& app, int& exit_code) {}
}
