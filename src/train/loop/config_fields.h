// Config declared once per field: each trainer config lists its fields once (flag, help, member; the default is the
// member's in-class initialiser), and from that one list the CLI binds the flags (cli/commands.h bind_fields: both
// spellings, --help with the real default), to_json writes the run's config (args.json, config.json, checkpoint
// metadata), and the start-up table prints the flags that differ from their defaults.
// Not here: validation (each config's validate(), which turns enum-like strings into enums).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace vdt {

template <class C>
struct ConfigField {
  using Member = std::variant<std::string C::*, double C::*, int64_t C::*, int C::*, uint64_t C::*, bool C::*>;
  std::string flag;  // the Python trainer's spelling, "--data_root" or "--data-root"; JSON key: the name with '_' for '-'
  std::string help;
  Member member;
  bool required = false;
  bool negatable = false;  // a bool that is on by default: --no-<flag> turns it off
  std::string key() const {
    std::string k = flag.substr(2);
    for (auto& ch : k) ch = ch == '-' ? '_' : ch;
    return k;
  }
};

// --precision of either trainer: mixed (bf16 compute, fp32 masters; SFT only), bf16, fp32.
enum class Precision { mixed, bf16, fp32 };

// How values are written: as JSON values (numbers, bools) or as the Python trainer rtcwm's args.json writes them, every value
// a string (Python's str(): "3.0", "2e-05", "True").
enum class JsonValues { typed, python_strings };

std::string py_float(double v);  // Python's str() of a float

template <class C>
nlohmann::ordered_json fields_to_json(const C& c, const std::vector<ConfigField<C>>& fields, JsonValues how) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& f : fields)
    std::visit(
        [&](auto m) {
          const auto& v = c.*m;
          using V = std::decay_t<decltype(v)>;
          if (how == JsonValues::typed) {
            j[f.key()] = v;
          } else if constexpr (std::is_same_v<V, std::string>) {
            j[f.key()] = v;
          } else if constexpr (std::is_same_v<V, bool>) {
            j[f.key()] = v ? "True" : "False";
          } else if constexpr (std::is_floating_point_v<V>) {
            j[f.key()] = py_float(v);
          } else {
            j[f.key()] = std::to_string(v);
          }
        },
        f.member);
  return j;
}

// "--flag value" for every field whose value differs from a default-constructed C (the start-up table's line).
template <class C>
std::string changed_fields(const C& c, const std::vector<ConfigField<C>>& fields) {
  const C defaults{};
  std::string out;
  for (const auto& f : fields)
    std::visit(
        [&](auto m) {
          if (c.*m == defaults.*m) return;
          const auto v = fields_to_json(c, std::vector<ConfigField<C>>{f}, JsonValues::python_strings).begin().value();
          out += (out.empty() ? "" : " ") + f.flag + " " + v.template get<std::string>();
        },
        f.member);
  return out.empty() ? "(all defaults)" : out;
}

}  // namespace vdt
