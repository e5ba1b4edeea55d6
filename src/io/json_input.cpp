// parse_json_input and json_for_message.
#include "io/json_input.h"

#include "base/check.h"
#include "base/input.h"

namespace sy {

nlohmann::json parse_json_input(std::string_view text, const std::string& source, std::string_view what) {
  check_json_depth(text, source);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // parse_error for bad syntax, out_of_range for numbers such as 1e400: either way the input is at fault.
    const std::string error = cut_for_message(e.what(), 200);
    if (what.empty()) SY_FAIL("{} is not valid JSON: {}", source, error);
    SY_FAIL("{}: {} is not valid JSON: {}", source, what, error);
  }
}

std::string json_for_message(const nlohmann::json& value) {
  return cut_for_message(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace sy
