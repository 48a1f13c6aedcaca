// 64-bit FNV-1a of a string: how a clip id (and a window's start) keys its sampling and validation noise draws.
#pragma once
#include <cstdint>
#include <string>

namespace vdt {

uint64_t fnv1a64(const std::string& s);

}  // namespace vdt
