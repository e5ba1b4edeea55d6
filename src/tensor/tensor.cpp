// Shape helpers and HostBuffer allocation.
#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>

#include "base/check.h"

namespace sy {

Shape::Shape(std::initializer_list<int64_t> dims) {
  SY_CHECK(dims.size() <= kMaxDims, "tensor rank {} exceeds the maximum {}", dims.size(), kMaxDims);
  for (int64_t d : dims) dims_[static_cast<size_t>(rank_++)] = d;
}

void Shape::push_back(int64_t d) {
  SY_CHECK(rank_ < kMaxDims, "tensor rank exceeds the maximum {}", kMaxDims);
  dims_[static_cast<size_t>(rank_++)] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[static_cast<size_t>(i)] != o.dims_[static_cast<size_t>(i)]) return false;
  }
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  SY_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  ptr_.reset(p);
}

void HostBuffer::Free::operator()(void* p) const { std::free(p); }

}  // namespace sy
