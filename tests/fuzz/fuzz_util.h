// What the libFuzzer harnesses share: a scratch folder of this process for the parsers that read files,
// and the rule every harness applies: bad input may throw only the error type of its layer (sy::Error, or
// the server's ApiError), which the commands turn into one line and exit 2 (or a 4xx); anything else
// escapes and libFuzzer reports it, as it reports crashes, hangs, leaks and sanitizer findings.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace sy::fuzz {

// A folder of this process, made on first use (the harnesses run one input at a time).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("sy_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes the input to scratch_dir()/name and returns the path.
inline std::filesystem::path write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::filesystem::path p = scratch_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace sy::fuzz
