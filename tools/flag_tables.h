// docs' flag tables and stated defaults, rendered from the declarations: every command's fields list
// (train/loop/config_fields.h) with its defaults. A table sits in a page between `<!-- flags:NAME -->` and
// `<!-- /flags -->`; a default stated in prose sits between `<!-- default:NAME --flag -->` and `<!-- /default -->`
// (the rendering writes the declared default there, as its table shows it). The hidden `vdt flag-tables PAGE...`
// rewrites both, and DocsFlagTables fails while a page of docs/ or the README differs from its rendering.
// Not here: the prose around them (written by hand).
#pragma once
#include <string>
#include <vector>

namespace vdt {

// The tables there are, one per command: train-sft (`vdt train sft`), train-causal, train-distill, bench-step,
// bench-plan, bench-sample, bench-kernels, data-check, data-inspect, data-synth, ckpt-inspect, ckpt-check, ckpt-diff,
// ckpt-merge-lora, ckpt-export, parity, demo, env, eval, sample.
std::vector<std::string> flag_table_names();
// The command a table belongs to: "train-sft" -> "train sft"; throws on an unknown name.
std::string flag_table_command(const std::string& name);
// The flags (and positional arguments, by name) a table lists, in order.
std::vector<std::string> flag_table_flags(const std::string& name);
// One command's table (flag | default | meaning); throws on an unknown name.
std::string command_flag_table(const std::string& name);
// One flag's default as its table shows it ("`auto`", "12", "on", "(empty)"); throws naming the table and the flag.
std::string command_flag_default(const std::string& name, const std::string& flag);
// `page` with every marked table's body and every marked default replaced by its rendering; throws naming an unknown
// or unclosed block.
std::string render_flag_tables(const std::string& page);
// The lines only `have` has ("-N: line", N its line there) and those only `want` has ("+N: line", N its line in
// `want`); empty when the texts are equal.
std::string line_diff(const std::string& have, const std::string& want);

}  // namespace vdt
