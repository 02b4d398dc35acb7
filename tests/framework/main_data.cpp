#define BOOST_TEST_MODULE qat_data
#include <boost/test/unit_test.hpp>
