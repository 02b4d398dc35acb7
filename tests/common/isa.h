#pragma once
// Test support for the runtime-dispatched kernels (framework/tensor/cpu.h).
//  - QAT_ISA_GLOBAL_FIXTURE(): in a test main; when ctest runs the executable with
//    QAT_CPU=<path> on a CPU that lacks that path, it prints "skipped: ..." and exits 77
//    (ctest's SKIP_RETURN_CODE), so every path the machine has runs and the others say so.
//  - for_each_isa(f): runs f() once per supported path (IsaGuard), for kernel-vs-reference
//    tests; BOOST_TEST_CONTEXT names the path in failures. avx2_vnni is left out: it runs the
//    AVX2 kernels but for the int8 GEMM, whose tests take for_each_int8_isa(f), every path.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <iostream>

#include "framework/tensor/cpu.h"

namespace qat::test {

struct IsaFixture {
  IsaFixture() {
    const cpu::Isa want = cpu::requested_isa(), have = cpu::isa();
    if (want != have) {
      std::cout << "skipped: QAT_CPU asks for " << cpu::isa_name(want)
                << " but this CPU supports at most " << cpu::isa_name(cpu::best_isa()) << "\n";
      std::exit(77);
    }
    if (std::getenv("QAT_CPU") != nullptr) std::cout << "kernels: " << cpu::describe() << "\n";
  }
};

namespace detail {
template <class F>
void run_on_paths(F&& f, bool with_avx2_vnni) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    if (isa == cpu::Isa::AVX2_VNNI && !with_avx2_vnni) continue;
    BOOST_TEST_CONTEXT("isa " << cpu::isa_name(isa)) {
      cpu::IsaGuard guard(isa);
      f(isa);
    }
  }
}
}  // namespace detail

template <class F>
void for_each_int8_isa(F&& f) {
  detail::run_on_paths(f, true);
}

template <class F>
void for_each_isa(F&& f) {
  detail::run_on_paths(f, false);
}

}  // namespace qat::test

using QatIsaFixture = qat::test::IsaFixture;
#define QAT_ISA_GLOBAL_FIXTURE() BOOST_TEST_GLOBAL_FIXTURE(QatIsaFixture)
