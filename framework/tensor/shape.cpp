#include "framework/tensor/shape.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "framework/tensor/error.h"

namespace qat {

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  QAT_REQUIRE(static_cast<int>(dims.size()) <= kMaxDims, "Shape", "rank ", dims.size(),
              " exceeds the maximum of ", kMaxDims);
  for (auto d : dims) push_back(d);
}

Shape::Shape(const std::vector<std::int64_t>& dims) {
  QAT_REQUIRE(static_cast<int>(dims.size()) <= kMaxDims, "Shape", "rank ", dims.size(),
              " exceeds the maximum of ", kMaxDims);
  for (auto d : dims) push_back(d);
}

void Shape::push_back(std::int64_t d) {
  QAT_REQUIRE(rank_ < kMaxDims, "Shape", "rank exceeds the maximum of ", kMaxDims);
  QAT_REQUIRE(d >= 0, "Shape", "negative dimension ", d);
  dims_[rank_++] = d;
}

std::int64_t Shape::at(int i) const { return dims_[axis(i, "Tensor::size")]; }

int Shape::axis(int a, const char* fn) const {
  const int r = std::max(rank_, 1);
  QAT_REQUIRE(a >= -r && a < r, fn, "dim ", a, " is out of range for shape ", str());
  return a < 0 ? a + r : a;
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  return rank_ == o.rank_ && std::equal(begin(), end(), o.begin());
}

std::string Shape::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (int i = 0; i < s.rank(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* fn) {
  const int r = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < r; ++i) {
    const int ia = a.rank() - r + i, ib = b.rank() - r + i;
    const std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    QAT_REQUIRE(da == db || da == 1 || db == 1, fn, "shapes ", a, " and ", b,
                " cannot be broadcast together");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

}  // namespace qat
