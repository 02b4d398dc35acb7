#define BOOST_TEST_MODULE qat_optim
#include <boost/test/unit_test.hpp>
