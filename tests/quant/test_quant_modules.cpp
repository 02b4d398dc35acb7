#include <boost/test/unit_test.hpp>
// Placeholder: being written.
BOOST_AUTO_TEST_CASE(placeholder_test_quant_modules) { BOOST_TEST(true); }
