#include "train/plan/cost_table.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace vdt {
namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

bool same_keep(double a, double b) { return std::abs(a - b) < 1e-9; }

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

BlockCost cost_of(const CostRow& r) {
  return {r.kept_bytes,      r.host_bytes, r.transient_bytes, r.seconds,
          r.outside_seconds, false,        r.text_rows,       r.text_row_bytes};
}

BlockCost lerp(const BlockCost& a, const BlockCost& b, double w) {
  auto mix = [w](double x, double y) { return x + (y - x) * w; };
  return {mix(a.kept_bytes, b.kept_bytes),           mix(a.host_bytes, b.host_bytes),
          mix(a.transient_bytes, b.transient_bytes), mix(a.seconds, b.seconds),
          mix(a.outside_seconds, b.outside_seconds), a.extrapolated || b.extrapolated,
          std::max(a.text_rows, b.text_rows),        mix(a.text_row_bytes, b.text_row_bytes)};
}

BlockCost scaled(const BlockCost& a, double s) {
  return {a.kept_bytes * s, a.host_bytes * s, a.transient_bytes * s, a.seconds * s, a.outside_seconds * s, true,
          a.text_rows,      a.text_row_bytes};  // a caption's keys and values do not grow with the rows
}

BlockCost field_max(const BlockCost& a, const BlockCost& b) {
  return {std::max(a.kept_bytes, b.kept_bytes),
          std::max(a.host_bytes, b.host_bytes),
          std::max(a.transient_bytes, b.transient_bytes),
          std::max(a.seconds, b.seconds),
          std::max(a.outside_seconds, b.outside_seconds),
          true,
          std::max(a.text_rows, b.text_rows),
          std::max(a.text_row_bytes, b.text_row_bytes)};
}

// The costs of `points` (one key, sorted by rows, distinct rows) at `rows` (cost_table.h: the extrapolation rule).
BlockCost in_rows(const std::vector<const CostRow*>& points, int64_t rows) {
  const auto& first = *points.front();
  const auto& last = *points.back();
  if (rows <= first.rows) {
    auto c = cost_of(first);
    if (rows < first.rows) {  // what a block keeps is per-row tensors: in proportion; the rest as the smallest size
      const double s = static_cast<double>(rows) / static_cast<double>(first.rows);
      c.kept_bytes *= s, c.host_bytes *= s, c.extrapolated = true;
    }
    return c;
  }
  if (rows >= last.rows) {
    if (rows == last.rows) return cost_of(last);
    const double r = static_cast<double>(rows);
    const auto proportional = scaled(cost_of(last), r / static_cast<double>(last.rows));
    if (points.size() == 1) return proportional;
    const auto& prev = *points[points.size() - 2];
    const double w = (r - prev.rows) / static_cast<double>(last.rows - prev.rows);
    return field_max(lerp(cost_of(prev), cost_of(last), w), proportional);
  }
  for (size_t i = 1; i < points.size(); ++i)
    if (rows <= points[i]->rows) {
      const auto& a = *points[i - 1];
      const auto& b = *points[i];
      return lerp(cost_of(a), cost_of(b), static_cast<double>(rows - a.rows) / static_cast<double>(b.rows - a.rows));
    }
  return cost_of(last);  // not reached
}

double number(const ordered_json& j, const std::string& key, const std::string& where) {
  VDT_CHECK(j.contains(key), where, ": missing key '", key, "'");
  VDT_CHECK(j[key].is_number(), where, ": key '", key, "': expected a number, got ", j[key].dump());
  const double v = j[key].get<double>();
  VDT_CHECK(std::isfinite(v) && v >= 0, where, ": key '", key, "': expected a finite number >= 0, got ", v);
  return v;
}

std::string text(const ordered_json& j, const std::string& key, const std::string& where,
                 const std::vector<std::string>& allowed = {}) {
  VDT_CHECK(j.contains(key), where, ": missing key '", key, "'");
  VDT_CHECK(j[key].is_string(), where, ": key '", key, "': expected a string, got ", j[key].dump());
  auto s = j[key].get<std::string>();
  if (!allowed.empty()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : " | ") + a;
    VDT_CHECK(std::find(allowed.begin(), allowed.end(), s) != allowed.end(), where, ": key '", key, "': expected ",
              list, ", got '", s, "'");
  }
  return s;
}

bool flag(const ordered_json& j, const std::string& key, const std::string& where) {
  VDT_CHECK(j.contains(key), where, ": missing key '", key, "'");
  VDT_CHECK(j[key].is_boolean(), where, ": key '", key, "': expected true or false, got ", j[key].dump());
  return j[key].get<bool>();
}

}  // namespace

bool CostKey::same_but_keep(const CostKey& o) const {
  return training == o.training && checkpointing == o.checkpointing && attn == o.attn && offload == o.offload;
}

std::string CostKey::describe() const {
  std::string s = training + " " + checkpointing + " " + attn;
  if (attn_keep > 0) s += " keep " + fmt(attn_keep);
  if (offload) s += " offload";
  return s;
}

std::vector<double> CostTable::keeps(const CostKey& key) const {
  std::vector<double> out;
  for (const auto& r : rows)
    if (r.key.same_but_keep(key) &&
        std::none_of(out.begin(), out.end(), [&](double k) { return same_keep(k, r.key.attn_keep); }))
      out.push_back(r.key.attn_keep);
  std::sort(out.begin(), out.end());
  return out;
}

bool CostTable::has(const CostKey& key) const {
  const auto ks = keeps(key);
  if (ks.empty()) return false;
  return key.attn_keep >= ks.front() - 1e-9 && key.attn_keep <= ks.back() + 1e-9;
}

bool CostTable::has_kind(const std::string& training, bool causal) const {
  return std::any_of(rows.begin(), rows.end(),
                     [&](const CostRow& r) { return r.key.training == training && (r.key.attn != "full") == causal; });
}

BlockCost CostTable::at(const CostKey& key, int64_t n) const {
  const auto ks = keeps(key);
  VDT_CHECK(
      has(key), source, ": no rows for '", key.describe(), "'", ks.empty() ? "" : " (its attn_keep values: ",
      [&] {
        std::string s;
        for (double k : ks) s += (s.empty() ? "" : ", ") + fmt(k);
        return ks.empty() ? s : s + ")";
      }(),
      "; measure them with `bench plan` (docs/planner.md) or fix that choice by its flag");
  auto points_at = [&](double keep) {
    std::map<int64_t, const CostRow*> by_rows;  // a later row of the same size wins
    for (const auto& r : rows)
      if (r.key.same_but_keep(key) && same_keep(r.key.attn_keep, keep)) by_rows[r.rows] = &r;
    std::vector<const CostRow*> pts;
    for (const auto& [_, r] : by_rows) pts.push_back(r);
    return in_rows(pts, n);
  };
  for (double k : ks)
    if (same_keep(k, key.attn_keep)) return points_at(k);
  const auto hi = std::lower_bound(ks.begin(), ks.end(), key.attn_keep);
  const double k_hi = *hi, k_lo = *(hi - 1);
  return lerp(points_at(k_lo), points_at(k_hi), (key.attn_keep - k_lo) / (k_hi - k_lo));
}

double BlockCost::kept_for_text(int64_t rows) const {
  return kept_bytes + static_cast<double>(std::max<int64_t>(0, rows - text_rows)) * text_row_bytes;
}

CostTable load_cost_table(const std::string& path) {
  std::ifstream f(path);
  VDT_CHECK(f.good(), path, ": cannot open the cost table (docs/planner.md says where tables live)");
  ordered_json j;
  try {
    j = ordered_json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    VDT_FAIL(path, ": not valid JSON (", e.what(), ")");
  }
  VDT_CHECK(j.is_object(), path, ": expected a JSON object with the keys of docs/planner.md");
  const auto format = text(j, "format", path);
  VDT_CHECK(format == CostTable::kFormat, path, ": key 'format': expected '", CostTable::kFormat, "', got '", format,
            "'; measure the table again with this vdt's `bench plan`");
  CostTable t;
  t.source = path;
  t.preset = text(j, "preset", path), t.card = text(j, "card", path), t.dtype = text(j, "dtype", path);
  t.device_name = j.value("device_name", std::string());
  t.measured = j.value("measured", std::string());
  t.memory_measured = flag(j, "memory_measured", path);
  VDT_CHECK(j.contains("rows") && j["rows"].is_array() && !j["rows"].empty(), path,
            ": key 'rows': expected a non-empty array of measured rows");
  for (size_t i = 0; i < j["rows"].size(); ++i) {
    const auto& r = j["rows"][i];
    const auto where = path + ": rows[" + std::to_string(i) + "]";
    VDT_CHECK(r.is_object(), where, ": expected an object");
    CostRow row;
    row.key.training = text(r, "training", where, {"full", "lora"});
    row.key.checkpointing = text(r, "checkpointing", where, {"none", "block", "selective"});
    row.key.attn = text(r, "attn", where, {"full", "prefix", "mask"});
    row.key.offload = flag(r, "offload", where);
    row.key.attn_keep = number(r, "attn_keep", where);
    VDT_CHECK(row.key.attn_keep <= 1, where, ": key 'attn_keep': expected a share in [0, 1], got ", row.key.attn_keep);
    row.rows = static_cast<int64_t>(number(r, "rows", where));
    VDT_CHECK(row.rows > 0, where, ": key 'rows': expected a row count > 0");
    row.kept_bytes = number(r, "kept_bytes", where);
    row.host_bytes = number(r, "host_bytes", where);
    row.transient_bytes = number(r, "transient_bytes", where);
    row.seconds = number(r, "seconds", where);
    row.outside_seconds = number(r, "outside_seconds", where);
    row.text_len = static_cast<int64_t>(number(r, "text_len", where));
    row.chunks = static_cast<int64_t>(number(r, "chunks", where));
    if (r.contains("text_rows")) {  // tables measured before these keys have none: no correction
      row.text_rows = static_cast<int64_t>(number(r, "text_rows", where));
      row.text_row_bytes = number(r, "text_row_bytes", where);
    }
    t.rows.push_back(row);
  }
  if (j.contains("copy")) {  // tables measured before streaming have none: the defaults
    const auto& c = j["copy"];
    const auto where = path + ": copy";
    VDT_CHECK(c.is_object(), where, ": expected an object");
    t.copy.h2d_bytes_per_second = number(c, "h2d_bytes_per_second", where);
    t.copy.overlap = number(c, "overlap", where);
    t.copy.dequant_bytes_per_second = number(c, "dequant_bytes_per_second", where);
    VDT_CHECK(t.copy.h2d_bytes_per_second > 0 && t.copy.dequant_bytes_per_second > 0, where,
              ": expected rates > 0 (bytes per second)");
    VDT_CHECK(t.copy.overlap <= 1, where, ": key 'overlap': expected a share in [0, 1], got ", t.copy.overlap);
    t.copy.measured = true;
  }
  return t;
}

void save_cost_table(const CostTable& table, const std::string& path) {
  auto rows = table.rows;
  std::stable_sort(rows.begin(), rows.end(), [](const CostRow& a, const CostRow& b) {
    auto ka = std::tie(a.key.training, a.key.attn, a.key.checkpointing, a.key.offload, a.key.attn_keep, a.rows);
    auto kb = std::tie(b.key.training, b.key.attn, b.key.checkpointing, b.key.offload, b.key.attn_keep, b.rows);
    return ka < kb;
  });
  ordered_json j;
  j["format"] = CostTable::kFormat;
  j["preset"] = table.preset, j["card"] = table.card, j["device_name"] = table.device_name;
  j["dtype"] = table.dtype, j["memory_measured"] = table.memory_measured, j["measured"] = table.measured;
  j["rows"] = ordered_json::array();
  for (const auto& r : rows)
    j["rows"].push_back({{"training", r.key.training},
                         {"checkpointing", r.key.checkpointing},
                         {"attn", r.key.attn},
                         {"offload", r.key.offload},
                         {"attn_keep", r.key.attn_keep},
                         {"rows", r.rows},
                         {"kept_bytes", std::round(r.kept_bytes)},
                         {"host_bytes", std::round(r.host_bytes)},
                         {"transient_bytes", std::round(r.transient_bytes)},
                         {"seconds", r.seconds},
                         {"outside_seconds", r.outside_seconds},
                         {"text_len", r.text_len},
                         {"chunks", r.chunks},
                         {"text_rows", r.text_rows},
                         {"text_row_bytes", std::round(r.text_row_bytes)}});
  if (table.copy.measured)
    j["copy"] = {{"h2d_bytes_per_second", std::round(table.copy.h2d_bytes_per_second)},
                 {"overlap", table.copy.overlap},
                 {"dequant_bytes_per_second", std::round(table.copy.dequant_bytes_per_second)}};
  const auto parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  write_file_atomic(path, j.dump(1) + "\n");
}

CostTable merge_cost_tables(const CostTable& base, const CostTable& add) {
  CostTable out = add;
  out.rows.clear();
  for (const auto& r : base.rows) {
    const bool replaced = std::any_of(add.rows.begin(), add.rows.end(), [&](const CostRow& a) {
      return a.key.same_but_keep(r.key) && same_keep(a.key.attn_keep, r.key.attn_keep) && a.rows == r.rows;
    });
    if (!replaced) out.rows.push_back(r);
  }
  out.rows.insert(out.rows.end(), add.rows.begin(), add.rows.end());
  if (!add.copy.measured) out.copy = base.copy;
  return out;
}

CostTable with_memory_from(const CostTable& times, const CostTable& memory) {
  CostTable out = times;
  out.source = times.source + " (times), " + memory.source + " (memory)";
  out.memory_measured = true;
  out.rows.clear();
  for (auto r : times.rows) {
    if (!memory.has(r.key)) continue;
    const auto m = memory.at(r.key, r.rows);
    r.kept_bytes = m.kept_bytes, r.host_bytes = m.host_bytes, r.transient_bytes = m.transient_bytes;
    r.text_rows = m.text_rows, r.text_row_bytes = m.text_row_bytes;
    out.rows.push_back(r);
  }
  return out;
}

std::string card_slug(const std::string& device_name) {
  std::string s;
  for (char c : device_name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!s.empty() && s.back() != '-')
      s += '-';
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "unknown" : s;
}

std::string cost_table_path(const std::string& plans_dir, const std::string& card, const std::string& preset) {
  return (fs::path(plans_dir) / card / (preset + ".json")).string();
}

std::vector<std::string> plans_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("VDT_PLANS"); env && *env) dirs.emplace_back(env);
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back((exe.parent_path().parent_path() / "share" / "vdt" / "plans").string());
    dirs.push_back((exe.parent_path().parent_path() / "plans").string());
  }
  return dirs;
}

std::string find_cost_table(const std::vector<std::string>& dirs, const std::string& card, const std::string& preset) {
  for (const auto& d : dirs) {
    const auto p = cost_table_path(d, card, preset);
    if (fs::is_regular_file(p)) return p;
  }
  return {};
}

ModelDims model_dims(Denoiser& model, int64_t text_len) {
  ModelDims d;
  d.width = model.width();
  d.dtype_bytes = static_cast<int64_t>(c10::elementSize(model.compute_dtype()));
  d.text_len = model.text_in_rows() ? 0 : text_len;  // the cross-attention's context; text in the rows counts there
  const auto blocks = model.block_modules();
  VDT_CHECK(!blocks.empty(), "model_dims: the ", model.preset(), " base has no blocks");
  // The FFN: the widest GEMM out of D (ffn.0, fc1; a fused qkv is narrower) and the widest into D (ffn.2, fc2).
  for (const auto& p : blocks.front()->parameters()) {
    d.block_params += p.numel();
    if (p.dim() != 2) continue;
    if (p.size(1) == d.width) d.ffn_hidden = std::max(d.ffn_hidden, p.size(0));
    if (p.size(0) == d.width) d.ffn_inner = std::max(d.ffn_inner, p.size(1));
  }
  d.ffn_hidden = std::max(d.ffn_hidden, d.width), d.ffn_inner = std::max(d.ffn_inner, d.width);
  return d;
}

CostTable analytic_cost_table(const ModelDims& d, const std::string& training, int64_t chunks,
                              const std::vector<int64_t>& rows, double tflops) {
  VDT_CHECK(d.width > 0 && d.block_params > 0 && tflops > 0,
            "analytic_cost_table: width, block_params and tflops "
            "must be positive (got ",
            d.width, ", ", d.block_params, ", ", tflops, ")");
  CostTable t;
  t.source = "analytic estimate (docs/planner.md)";
  t.dtype = d.dtype_bytes == 4 ? "fp32" : "bf16";
  const double D = static_cast<double>(d.width), b = static_cast<double>(d.dtype_bytes);
  const bool cross = d.text_len > 0;
  const double kSafety = 1.25;  // over the tensors counted below: what the count misses (modulation rows, workspaces)
  // Elements per row (docs/planner.md, "The analytic estimate").
  const double sel = (cross ? 13 : 10) * D + static_cast<double>(d.ffn_hidden);
  const double none = sel + 8 * D + static_cast<double>(d.ffn_inner);
  const double work = 2 * static_cast<double>(d.ffn_hidden) + 4 * D;
  // One caption's cross-attention keys and values with the projections they come from, which a keeping block holds
  // (block checkpointing recomputes them): the rows count one, text_row_bytes each one more.
  const double caption = cross ? kSafety * 4 * static_cast<double>(d.text_len) * D * b : 0;
  std::vector<std::string> attns =
      chunks > 0 ? std::vector<std::string>{"prefix", "mask"} : std::vector<std::string>{"full"};
  for (int64_t n : rows) {
    const double r = static_cast<double>(n);
    const double gemm = 2 * r * static_cast<double>(d.block_params);
    const double cross_attn = cross ? 4 * r * static_cast<double>(d.text_len) * D : 0;
    for (const auto& attn : attns) {
      // the prefix kernel computes chunk i against chunks 0..i; the dense mask kernel the whole square, slower
      const double keys = attn == "prefix" ? r * (chunks + 1) / (2.0 * chunks) : r;
      const double self_attn = 4 * r * keys * D * (attn == "mask" ? 1.3 : 1.0);
      const double fwd = gemm + self_attn + cross_attn;
      const double train = (training == "full" ? 3 : 2) * fwd;
      // the mask kernel's SDPA turns the boolean [R, R] mask into an additive bias of 2 bytes a pair and keeps it for
      // its backward: a selective block keeps it, a recomputing one makes it again in its backward
      const double mask_bias = attn == "mask" ? 2 * r * r : 0;
      auto add = [&](const std::string& ckpt, bool offload, double keep) {
        CostRow c;
        c.key = {training, ckpt, attn, offload, keep};
        c.rows = n, c.text_len = d.text_len, c.chunks = chunks;
        double kept = 0, host = 0, transient = work, flops = train;
        if (ckpt == "none") {
          kept = none;
        } else if (ckpt == "block") {
          kept = D * (1 + keep), transient += none;
          flops += fwd - keep * self_attn;
        } else {
          kept = sel, transient += none - sel;
          flops += 0.1 * fwd;  // the elementwise chains between the kept outputs
        }
        if (offload) {  // a recomputing block's input (and kept attention) go to the host; a keeping block keeps all
          const double moved = ckpt == "block" ? D * (1 + keep) : 0;
          kept -= moved, host += moved, flops *= 1.03;
        }
        c.text_rows = cross ? 1 : 0;
        c.text_row_bytes = ckpt == "block" ? 0 : caption;
        c.kept_bytes = kSafety * kept * r * b + c.text_row_bytes + (ckpt == "selective" ? mask_bias : 0);
        c.host_bytes = kSafety * host * r * b;
        c.transient_bytes = kSafety * transient * r * b + (ckpt == "selective" ? 0 : mask_bias);
        c.seconds = flops / (tflops * 1e12);
        t.rows.push_back(c);
      };
      if (chunks == 0) add("none", false, 0);
      for (bool offload : chunks > 0 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
        add("selective", offload, 0);
        for (double keep : attn == "prefix" ? std::vector<double>{0, 0.5, 1} : std::vector<double>{0})
          add("block", offload, keep);
      }
    }
  }
  return t;
}

}  // namespace vdt
