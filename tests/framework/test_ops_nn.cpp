#include <boost/test/unit_test.hpp>
// Placeholder: being implemented.
