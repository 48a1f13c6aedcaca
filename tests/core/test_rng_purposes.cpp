// Every random-stream purpose is registered once (core/rng_purposes.h) and no two share a value: two owners drawing
// from one stream would correlate draws that must be independent.
#include <set>

#include "core/rng_purposes.h"
#include "test_util.h"

namespace vdt {
namespace {

TEST(RngPurposes, AreDistinct) {
  std::set<uint32_t> seen;
  for (const auto& [name, value] : rng_purpose::kAll)
    EXPECT_TRUE(seen.insert(value).second) << name << " = 0x" << std::hex << value << " is registered twice";
  EXPECT_EQ(seen.size(), rng_purpose::kAll.size());
}

}  // namespace
}  // namespace vdt
