// Config declared once per field: each config lists its fields once (flag, help, where the value lives; the default is
// the member's in-class initialiser), and from that one list the CLI binds the flags (cli/commands.h bind_fields: both
// spellings, --help with the real default), to_json writes the run's config (args.json, config.json, checkpoint
// metadata), the start-up table prints the flags that differ from their defaults, and docs/cli.md's flag tables are
// rendered (tools/flag_tables.h). A knob several commands share lives in a section (train/loop/config_sections.h) that
// a config holds as a member; `lift` makes the section's fields the config's, at the place the config lists them.
// Every command's flags are declared this way, its positional arguments too (a field named without dashes: "files").
// Not here: validation (each config's validate(), which turns enum-like strings into enums).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/py_float.h"

namespace vdt {

// Where a field's value lives in a config C: one of C's members, or a member of a section C holds (lift).
template <class C, class T>
class FieldRef {
 public:
  using Value = T;
  FieldRef(T C::*member) : get_([member](C& c) -> T& { return c.*member; }) {}  // implicit: {"--x", "...", &C::x}
  template <class S>
  FieldRef(S C::*section, const FieldRef<S, T>& inner)
      : get_([section, inner](C& c) -> T& { return inner(c.*section); }) {}
  T& operator()(C& c) const { return get_(c); }
  const T& operator()(const C& c) const { return get_(const_cast<C&>(c)); }  // a read: nothing is written through it

 private:
  std::function<T&(C&)> get_;
};

template <class C>
struct ConfigField {
  using Member = std::variant<FieldRef<C, std::string>, FieldRef<C, double>, FieldRef<C, int64_t>, FieldRef<C, int>,
                              FieldRef<C, uint64_t>, FieldRef<C, bool>, FieldRef<C, std::vector<std::string>>,
                              FieldRef<C, std::vector<int64_t>>>;
  // The Python trainer's spelling, "--data_root" or "--data-root"; a name without dashes ("files") is a positional
  // argument. JSON key: the name without dashes, '_' for '-'.
  std::string flag;
  std::string help;
  Member member;
  bool required = false;
  bool negatable = false;  // a bool that is on by default: --no-<flag> turns it off
  int values = 0;          // a list: exactly this many values (0: one or more; a positional list takes the rest)
  bool positional() const { return flag.rfind("--", 0) != 0; }
  std::string key() const {
    std::string k = positional() ? flag : flag.substr(2);
    for (auto& ch : k) ch = ch == '-' ? '_' : ch;
    return k;
  }
};

// A section's field as a field of C, which holds the section as its member `section` (config_sections.h).
template <class C, class S>
ConfigField<C> lift(S C::*section, const ConfigField<S>& f) {
  auto member = std::visit(
      [&](const auto& ref) -> typename ConfigField<C>::Member {
        return FieldRef<C, typename std::decay_t<decltype(ref)>::Value>(section, ref);
      },
      f.member);
  return {f.flag, f.help, std::move(member), f.required, f.negatable, f.values};
}
// The field of a section's list whose flag is `flag`, as a field of C: where C's list places it. Throws on a flag the
// section does not declare.
template <class C, class S>
ConfigField<C> lift(S C::*section, const std::vector<ConfigField<S>>& fields, std::string_view flag) {
  for (const auto& f : fields)
    if (f.flag == flag) return lift(section, f);
  throw std::logic_error("lift: no field " + std::string(flag) + " in the section");
}
// Every field of a section's list, in its order.
template <class C, class S>
std::vector<ConfigField<C>> lift(S C::*section, const std::vector<ConfigField<S>>& fields) {
  std::vector<ConfigField<C>> out;
  for (const auto& f : fields) out.push_back(lift(section, f));
  return out;
}

// How values are written: as JSON values (numbers, bools) or as the Python trainer rtcwm's args.json writes them, every
// value a string (Python's str(): "3.0", "2e-05", "True").
enum class JsonValues { typed, python_strings };

std::string py_float(double v);  // Python's str() of a float

template <class T>
inline constexpr bool is_list_v = false;
template <class T>
inline constexpr bool is_list_v<std::vector<T>> = true;
// Python's str() of a list: "['a', 'b']", "[4, 6]".
std::string python_list(const std::vector<std::string>& v);
std::string python_list(const std::vector<int64_t>& v);

template <class C>
nlohmann::ordered_json fields_to_json(const C& c, const std::vector<ConfigField<C>>& fields, JsonValues how) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& f : fields)
    std::visit(
        [&](const auto& ref) {
          const auto& v = ref(c);
          using V = std::decay_t<decltype(v)>;
          if (how == JsonValues::typed) {
            j[f.key()] = v;
          } else if constexpr (is_list_v<V>) {
            j[f.key()] = python_list(v);
          } else if constexpr (std::is_same_v<V, std::string>) {
            j[f.key()] = v;
          } else if constexpr (std::is_same_v<V, bool>) {
            j[f.key()] = v ? "True" : "False";
          } else if constexpr (std::is_floating_point_v<V>) {
            j[f.key()] = py_float(v);
          } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {  // a repeatable flag: Python's str(list)
            std::string list = "[";
            for (size_t i = 0; i < v.size(); ++i) list += (i ? ", '" : "'") + v[i] + "'";
            j[f.key()] = list + "]";
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
        [&](const auto& ref) {
          if (ref(c) == ref(defaults)) return;
          const auto v = fields_to_json(c, std::vector<ConfigField<C>>{f}, JsonValues::python_strings).begin().value();
          out += (out.empty() ? "" : " ") + f.flag + " " + v.template get<std::string>();
        },
        f.member);
  return out.empty() ? "(all defaults)" : out;
}

}  // namespace vdt
