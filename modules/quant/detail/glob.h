#pragma once
// The glob matcher of module-name rules (QConfigRegistry's glob rules, the model-wide switches
// of control.h): shell patterns `*`, `?`, `[...]`, where `*` also matches dots.
#include <fnmatch.h>

#include <string>

namespace qat::quant::detail {

inline bool glob_match(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

}  // namespace qat::quant::detail
