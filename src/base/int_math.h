// Saturating int64 arithmetic for sizes computed from input (byte counts of a plan, token budgets): a
// result too large for int64 becomes INT64_MAX ("does not fit") instead of wrapping into a negative size.
#pragma once

#include <cstdint>
#include <limits>

namespace sy {

// For non-negative operands.
inline int64_t mul_sat(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
inline int64_t add_sat(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
// ceil(a / b) for a >= 0, b > 0, without the overflow of a + b - 1.
inline int64_t ceil_div_sat(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace sy
