// Python str operations on UTF-8 strings: code point indexing, strip/split/replace/find, case mapping.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/unicode.h"

namespace sy::text::jinja::str {

// Code points of a UTF-8 string (invalid bytes decode as themselves, so nothing is lost).
std::vector<char32_t> decode(std::string_view s);
using detail::append_utf8;  // one UTF-8 encoder for the text layer (unicode.h)
std::string encode(const std::vector<char32_t>& cps, size_t begin, size_t end);
size_t length(std::string_view s);  // in code points

bool is_space(char32_t c);      // Python's str.isspace for one code point
bool is_linebreak(char32_t c);  // a line boundary of str.splitlines

// strip/lstrip/rstrip: `chars` absent strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit); absent sep splits on runs of whitespace. Throws on an empty sep.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s);
std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);
// str.find / str.count over code points (returns a code point index, or -1).
int64_t find(std::string_view s, std::string_view sub);
int64_t count(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);   // str.capitalize
std::string py_title(std::string_view s);     // str.title
std::string jinja_title(std::string_view s);  // Jinja's |title filter
bool is_alpha(char32_t c);
bool is_upper_str(std::string_view s);
bool is_lower_str(std::string_view s);

}  // namespace sy::text::jinja::str
