// docs/cli.md's flag tables, rendered from the declarations: each command's fields list (train/loop/config_fields.h)
// with its defaults. A table sits in a page between `<!-- flags:NAME -->` and `<!-- /flags -->`; the
// hidden `vdt flag-tables PAGE` rewrites those blocks, and DocsFlagTables fails while they differ from the rendering.
// Not here: the prose around the tables (written by hand).
#pragma once
#include <string>
#include <vector>

namespace vdt {

// The tables there are: train-sft (`vdt train sft`), train-causal (`vdt train causal`), bench-step (`vdt bench step`),
// bench-plan (`vdt bench plan`), sample (`vdt sample`).
std::vector<std::string> flag_table_names();
// One command's table (flag | default | meaning); throws on an unknown name.
std::string command_flag_table(const std::string& name);
// `page` with every marked block's body replaced by its table; throws naming an unknown or unclosed block.
std::string render_flag_tables(const std::string& page);
// The lines only `have` has ("-N: line", N its line there) and those only `want` has ("+N: line", N its line in
// `want`); empty when the texts are equal.
std::string line_diff(const std::string& have, const std::string& want);

}  // namespace vdt
