#include "core/py_float.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace vdt {

// Python's repr/str of a float: the shortest digits that read back to v, written fixed when the decimal exponent is in
// [-4, 16) ("10.0", "0.0001", "1000000000000000.0") and in exponent form otherwise, with at least two exponent digits
// ("1e-05", "1e+16", "2.5e-07").
std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {  // "-d.ddde+XX" with prec significant digits
    std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  const std::string e(buf);
  const bool neg = e[0] == '-';
  const size_t epos = e.find('e');
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < epos; ++i)
    if (e[i] != '.') digits += e[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exp = std::atoi(e.c_str() + epos + 1);
  const int n = static_cast<int>(digits.size());
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (exp + 1 >= n) {
      out += digits + std::string(static_cast<size_t>(exp + 1 - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  char tail[16];
  std::snprintf(tail, sizeof(tail), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + tail;
}

std::string python_list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", '" : "'") + v[i] + "'";
  return out + "]";
}

std::string python_list(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

}  // namespace vdt
