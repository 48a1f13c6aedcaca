// Python's str() of a float, for the files the Python trainer reads back (args.json, LoRA metadata) and the flag
// tables.
#pragma once
#include <string>

namespace vdt {

std::string py_float(double v);  // Python's str() of a float: "10.0", "0.0001", "1e-05", "2.5e-07"

}  // namespace vdt
