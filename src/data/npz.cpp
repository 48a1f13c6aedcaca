// A minimal numpy .npz reader: the zip central directory (with zip64 extras, which numpy's savez always writes in
// local headers), stored or deflated members (zlib raw inflate), and the .npy v1-v3 header (little-endian numeric
// dtypes, C or Fortran order). Format references: PKWARE APPNOTE 6.3, numpy NEP 1 (the .npy format).
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/clip_io.h"

namespace vdt {
namespace {

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t rd32(const uint8_t* p) { return static_cast<uint32_t>(rd16(p)) | (static_cast<uint32_t>(rd16(p + 2)) << 16); }
uint64_t rd64(const uint8_t* p) { return static_cast<uint64_t>(rd32(p)) | (static_cast<uint64_t>(rd32(p + 4)) << 32); }

struct Member {
  uint16_t method = 0, flags = 0;
  uint64_t comp_size = 0, size = 0, local_offset = 0;
};

// Finds `name` in the central directory.
Member find_member(const std::string& path, const std::string& buf, const std::string& name) {
  const auto* b = reinterpret_cast<const uint8_t*>(buf.data());
  const size_t n = buf.size();
  VDT_CHECK(n >= 22, path, ": not a zip (.npz) file: ", n, " bytes");
  size_t eocd = std::string::npos;
  for (size_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 65535;)
    if (rd32(b + i) == 0x06054b50u) {
      eocd = i;
      break;
    }
  VDT_CHECK(eocd != std::string::npos, path, ": not a zip (.npz) file (no end of central directory record)");
  uint64_t entries = rd16(b + eocd + 10), cd_size = rd32(b + eocd + 12), cd_offset = rd32(b + eocd + 16);
  if ((entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_offset == 0xFFFFFFFFu) && eocd >= 20 &&
      rd32(b + eocd - 20) == 0x07064b50u) {
    const uint64_t z = rd64(b + eocd - 20 + 8);
    VDT_CHECK(z + 56 <= n && rd32(b + z) == 0x06064b50u, path, ": corrupt zip64 end of central directory");
    entries = rd64(b + z + 32);
    cd_size = rd64(b + z + 40);
    cd_offset = rd64(b + z + 48);
  }
  VDT_CHECK(cd_offset + cd_size <= n, path, ": corrupt zip: central directory past the end of the file");
  uint64_t p = cd_offset;
  for (uint64_t e = 0; e < entries; ++e) {
    VDT_CHECK(p + 46 <= n && rd32(b + p) == 0x02014b50u, path, ": corrupt zip central directory entry ", e);
    Member m;
    m.flags = rd16(b + p + 8);
    m.method = rd16(b + p + 10);
    m.comp_size = rd32(b + p + 20);
    m.size = rd32(b + p + 24);
    const uint16_t name_len = rd16(b + p + 28), extra_len = rd16(b + p + 30), comment_len = rd16(b + p + 32);
    m.local_offset = rd32(b + p + 42);
    VDT_CHECK(p + 46 + name_len + extra_len + comment_len <= n, path, ": corrupt zip central directory entry ", e);
    const std::string member(buf.data() + p + 46, name_len);
    // zip64 extra field: the 64-bit values of exactly those fields that are 0xFFFFFFFF, in this order.
    for (uint64_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
      const uint16_t id = rd16(b + x), len = rd16(b + x + 2);
      if (id == 0x0001) {
        uint64_t q = x + 4;
        if (m.size == 0xFFFFFFFFu && q + 8 <= x + 4 + len) m.size = rd64(b + q), q += 8;
        if (m.comp_size == 0xFFFFFFFFu && q + 8 <= x + 4 + len) m.comp_size = rd64(b + q), q += 8;
        if (m.local_offset == 0xFFFFFFFFu && q + 8 <= x + 4 + len) m.local_offset = rd64(b + q);
      }
      x += 4 + len;
    }
    if (member == name) return m;
    p += 46 + name_len + extra_len + comment_len;
  }
  VDT_FAIL(path, ": no member '", name, "' in the .npz");
}

std::string extract(const std::string& path, const std::string& buf, const Member& m, const std::string& name) {
  const auto* b = reinterpret_cast<const uint8_t*>(buf.data());
  const uint64_t n = buf.size();
  VDT_CHECK(!(m.flags & 1), path, ": member '", name, "' is encrypted");
  VDT_CHECK(m.local_offset + 30 <= n && rd32(b + m.local_offset) == 0x04034b50u, path,
            ": corrupt zip local header of '", name, "'");
  const uint64_t data = m.local_offset + 30 + rd16(b + m.local_offset + 26) + rd16(b + m.local_offset + 28);
  VDT_CHECK(data + m.comp_size <= n, path, ": member '", name, "' runs past the end of the file (truncated?)");
  if (m.method == 0) {
    VDT_CHECK(m.comp_size == m.size, path, ": stored member '", name, "' has inconsistent sizes");
    return buf.substr(data, m.size);
  }
  VDT_CHECK(m.method == 8, path, ": member '", name, "' uses zip method ", m.method,
            ", expected 0 (stored) or 8 (deflate)");
  std::string out(m.size, '\0');
  z_stream zs{};
  VDT_CHECK(inflateInit2(&zs, -MAX_WBITS) == Z_OK, path, ": zlib inflateInit2 failed");
  zs.next_in = const_cast<Bytef*>(b + data);
  zs.avail_in = static_cast<uInt>(m.comp_size);
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&zs, Z_FINISH);
  const uint64_t got = zs.total_out;
  inflateEnd(&zs);
  VDT_CHECK(rc == Z_STREAM_END && got == m.size, path, ": cannot inflate member '", name, "' (zlib code ", rc, ", ",
            got, " of ", m.size, " bytes)");
  return out;
}

// Value of `key` in the .npy header dict, e.g. 'descr': '<u1' -> "'<u1'".
std::string dict_value(const std::string& path, const std::string& header, const std::string& key) {
  const auto k = header.find("'" + key + "'");
  VDT_CHECK(k != std::string::npos, path, ": .npy header lacks '", key, "': ", header);
  auto v = header.find(':', k);
  VDT_CHECK(v != std::string::npos, path, ": malformed .npy header: ", header);
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  size_t end = v;
  if (header[v] == '(') {
    end = header.find(')', v);
    VDT_CHECK(end != std::string::npos, path, ": malformed .npy header: ", header);
    ++end;
  } else if (header[v] == '\'' || header[v] == '"') {
    end = header.find(header[v], v + 1);
    VDT_CHECK(end != std::string::npos, path, ": malformed .npy header: ", header);
    ++end;
  } else {
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  }
  return header.substr(v, end - v);
}

at::ScalarType npy_dtype(const std::string& path, const std::string& descr, size_t* itemsize) {
  VDT_CHECK(descr.size() >= 3, path, ": unsupported .npy dtype ", descr);
  const char order = descr[0];
  const std::string t = descr.substr(1);
  static const std::vector<std::tuple<std::string, at::ScalarType, size_t>> table = {
      {"b1", at::kBool, 1},   {"u1", at::kByte, 1}, {"i1", at::kChar, 1},   {"i2", at::kShort, 2},
      {"u2", at::kUInt16, 2}, {"i4", at::kInt, 4},  {"u4", at::kUInt32, 4}, {"i8", at::kLong, 8},
      {"u8", at::kUInt64, 8}, {"f2", at::kHalf, 2}, {"f4", at::kFloat, 4},  {"f8", at::kDouble, 8}};
  for (const auto& [name, st, size] : table)
    if (t == name) {
      VDT_CHECK(order != '>' || size == 1, path, ": big-endian .npy dtype ", descr, " is not supported");
      *itemsize = size;
      return st;
    }
  VDT_FAIL(path, ": unsupported .npy dtype ", descr);
}

torch::Tensor parse_npy(const std::string& path, const std::string& npy) {
  const auto* b = reinterpret_cast<const uint8_t*>(npy.data());
  VDT_CHECK(npy.size() >= 10 && std::memcmp(npy.data(), "\x93NUMPY", 6) == 0, path, ": member is not a .npy array");
  const int major = b[6];
  VDT_CHECK(major >= 1 && major <= 3, path, ": .npy format version ", major, " is not supported");
  const size_t hlen = major == 1 ? rd16(b + 8) : (npy.size() >= 12 ? rd32(b + 8) : npy.size());
  const size_t hstart = major == 1 ? 10 : 12;
  VDT_CHECK(hstart + hlen <= npy.size(), path, ": truncated .npy header");
  const std::string header = npy.substr(hstart, hlen);
  std::string descr = dict_value(path, header, "descr");
  VDT_CHECK(descr.size() >= 2 && (descr[0] == '\'' || descr[0] == '"'), path, ": structured .npy dtype ", descr,
            " is not supported");
  descr = descr.substr(1, descr.size() - 2);
  const bool fortran = dict_value(path, header, "fortran_order") == "True";
  std::vector<int64_t> shape;
  {
    std::string s = dict_value(path, header, "shape");
    for (char& c : s)
      if (c == '(' || c == ')' || c == ',') c = ' ';
    std::istringstream in(s);
    int64_t d;
    while (in >> d) shape.push_back(d);
  }
  size_t itemsize = 0;
  const auto st = npy_dtype(path, descr, &itemsize);
  int64_t numel = 1;
  for (const int64_t d : shape) numel *= d;
  const size_t bytes = static_cast<size_t>(numel) * itemsize;
  VDT_CHECK(hstart + hlen + bytes <= npy.size(), path, ": .npy data holds ", npy.size() - hstart - hlen,
            " bytes, expected ", bytes, " for dtype ", descr, " (truncated?)");
  std::vector<int64_t> stored = shape;
  if (fortran) std::reverse(stored.begin(), stored.end());
  auto t = torch::empty(stored, torch::TensorOptions().dtype(st));
  if (bytes) std::memcpy(t.data_ptr(), npy.data() + hstart + hlen, bytes);
  if (fortran && shape.size() > 1) {
    std::vector<int64_t> perm(shape.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(perm.size() - 1 - i);
    t = t.permute(perm).contiguous();
  }
  return t;
}

}  // namespace

torch::Tensor read_npz(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  VDT_CHECK(in.good(), path, ": cannot open .npz file");
  std::ostringstream os;
  os << in.rdbuf();
  const std::string buf = os.str();
  const std::string name = key + ".npy";
  const Member m = find_member(path, buf, name);
  return parse_npy(path + " (" + name + ")", extract(path, buf, m, name));
}

}  // namespace vdt
