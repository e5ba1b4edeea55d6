// Reading what the benchmarks print (run through common/run_switchyard.h): the tables of
// `bench latency` and `bench comm` as columns by header name, their JSON files, the lines that are errors, and
// the check that flags are refused before a command starts.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/run_switchyard.h"

namespace sy::test {

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

inline size_t count_lines_starting(const std::string& text, const std::string& prefix) {
  size_t n = 0;
  for (const auto& l : lines_of(text)) n += l.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

// Lines that start with "switchyard: " (errors); other program output counts 100 each, log lines none.
inline int error_lines(const std::string& out) {
  int n = 0;
  for (const auto& l : lines_of(out)) {
    if (l.empty() || l[0] == '[') continue;
    n += l.rfind("switchyard: ", 0) == 0 ? 1 : 100;
  }
  return n;
}

// One table of `bench latency`: the phase columns (the section after the last '|', one word per column) by
// name, for each row.
struct PhaseTable {
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> rows;  // the phase cells of each row
  std::vector<int64_t> batches;

  std::optional<size_t> column(const std::string& name) const {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return i;
    }
    return std::nullopt;
  }
};

inline std::string after_last_bar(const std::string& line) {
  const size_t bar = line.rfind('|');
  return bar == std::string::npos ? line : line.substr(bar + 1);
}

// The first table whose header line starts with `header_start`; its rows are the lines after it up to
// the first blank or non-numeric one.
inline PhaseTable read_latency_table(const std::string& out, const std::string& header_start = " batch") {
  PhaseTable t;
  const auto lines = lines_of(out);
  size_t i = 0;
  while (i < lines.size() && lines[i].rfind(header_start, 0) != 0) ++i;
  if (i == lines.size()) return t;
  t.names = words_of(after_last_bar(lines[i]));
  for (++i; i < lines.size(); ++i) {
    const auto words = words_of(lines[i]);
    if (words.empty() || words[0].find_first_not_of("0123456789") != std::string::npos) break;
    t.batches.push_back(std::stoll(words[0]));
    t.rows.push_back(words_of(after_last_bar(lines[i])));
  }
  return t;
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

// Flags `command` (e.g. "bench comm") refuses before it starts anything.
struct RefusedFlags {
  std::string args;
  std::string message;  // a substring of the one error line
};

// Each case exits with code 2 and one error line holding its message, and prints nothing of `started` (what the
// command says once it runs).
inline void expect_refused(const std::string& command, const std::vector<RefusedFlags>& cases,
                           const std::string& started) {
  for (const auto& c : cases) {
    const auto r = run_switchyard(command + " " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_EQ(error_lines(r.out), 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find(started), std::string::npos) << c.args << "\n" << r.out;
  }
}

}  // namespace sy::test
