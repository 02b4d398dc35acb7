#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

namespace qat {

/// Dimensions of a contiguous row-major tensor, stored inline (no heap) up to kMaxDims.
class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(const std::vector<std::int64_t>& dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t& operator[](int i) { return dims_[i]; }
  /// Dimension `i`, negative counting from the end; throws if out of range.
  std::int64_t at(int i) const;
  std::int64_t numel() const;
  const std::int64_t* begin() const { return dims_.data(); }
  const std::int64_t* end() const { return dims_.data() + rank_; }
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }
  void push_back(std::int64_t d);

  /// Normalises a possibly negative axis; throws naming `fn` if out of range.
  int axis(int a, const char* fn) const;

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[64, 1, 28, 28]"

 private:
  std::array<std::int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

/// The NumPy broadcast of two shapes; throws naming `fn` if incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* fn);

}  // namespace qat
