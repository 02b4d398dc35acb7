#include "framework/tensor/error.h"

#include <cstdio>
#include <cstdlib>

namespace qat::detail {

void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "qat internal error: %s:%d: check failed: %s %s\n", file, line, cond,
               msg.c_str());
  std::abort();
}

}  // namespace qat::detail
