#define BOOST_TEST_MODULE qat_quant
#include <boost/test/unit_test.hpp>
