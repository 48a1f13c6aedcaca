// The one precompiled header shared by every vdt target: the LibTorch C++ API and the standard library pieces
// every area uses. Keeping this list short keeps the PCH build (once per configuration) cheap.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
