// Checks with source location and the error type every layer throws.
#pragma once

#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>

namespace sy {

// An error the user can act on: what() is the one-line message, where() the code location that raised it.
class Error : public std::runtime_error {
 public:
  Error(std::string message, std::source_location loc);
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// The message is taken by reference, not by value: with a by-value std::string, clang 15 and 16 at -O1
// and above built code that freed another object's string (LLVM's stack colouring, by every sign; gone
// with -mllvm -no-stack-coloring): docs/fuzzing.md, "Fixed: clang 15 and 16 miscompile throw_error calls".
[[noreturn]] void throw_error(std::string&& message, std::source_location loc = std::source_location::current());

}  // namespace sy

// SY_CHECK(cond, "fmt {}", args...): throws sy::Error with the formatted message and the caller's location.
#define SY_CHECK(cond, ...)                                                           \
  do {                                                                                \
    if (!(cond)) [[unlikely]] {                                                       \
      ::sy::throw_error(::fmt::format(__VA_ARGS__), std::source_location::current()); \
    }                                                                                 \
  } while (0)

#define SY_FAIL(...) ::sy::throw_error(::fmt::format(__VA_ARGS__), std::source_location::current())
