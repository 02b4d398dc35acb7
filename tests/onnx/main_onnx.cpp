#define BOOST_TEST_MODULE qat_onnx
#include <boost/test/unit_test.hpp>

#include "common/isa.h"
QAT_ISA_GLOBAL_FIXTURE();
