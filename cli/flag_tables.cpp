// `vdt flag-tables PAGE...` (hidden): rewrites the flag tables of docs pages from the declarations
// (tools/flag_tables.h); with --check it writes nothing, prints what differs and exits 1 when a page is out of date.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "tools/command_args.h"
#include "tools/flag_tables.h"

namespace vdt::cli {

void add_flag_tables(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<FlagTablesArgs>();
  auto* s = app.add_subcommand("flag-tables",
                               "Rewrite the flag tables of docs pages (docs/cli.md) from the flags' "
                               "declarations");
  s->group("");  // hidden: a maintenance step, not a user's command
  bind_fields(s, args, FlagTablesArgs::fields());
  s->callback([args, &exit_code] {
    exit_code = 0;
    for (const auto& page : args->pages) {
      std::ifstream in(page);
      VDT_CHECK(in, page, ": cannot read it");
      std::stringstream text;
      text << in.rdbuf();
      const auto rendered = render_flag_tables(text.str());
      if (rendered == text.str()) continue;
      if (args->check) {
        std::printf(
            "%s: the flag tables differ from the declarations (-N: line N of the page, +N: line N of the "
            "rendering):\n%s",
            page.c_str(), line_diff(text.str(), rendered).c_str());
        exit_code = 1;
      } else {
        write_file_atomic(page, rendered);
        std::printf("%s: flag tables rewritten\n", page.c_str());
      }
    }
  });
}

}  // namespace vdt::cli
