#include <boost/test/unit_test.hpp>
// Placeholder: being written.
BOOST_AUTO_TEST_CASE(placeholder_test_histogram) { BOOST_TEST(true); }
