// JSON from files for the io layer: nesting bounded before the (recursive) parser runs, every exception
// of the parser turned into a one-line sy::Error naming the file, and values cut when an error shows them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace sy {

// Parses `text`; `what` says which part of `source` it is ("header", ...; empty: all of it).
nlohmann::json parse_json_input(std::string_view text, const std::string& source, std::string_view what);

// A value as an error may quote it: compact JSON (invalid UTF-8 replaced, never thrown), cut to
// kMessageValueChars characters.
std::string json_for_message(const nlohmann::json& value);

}  // namespace sy
