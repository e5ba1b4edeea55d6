// libFuzzer: a chat template's text, parsed and rendered as apply_chat_template renders it, over a fixed
// conversation with a tool call and tools, twice (the two renders must agree).
#include <nlohmann/json.hpp>
#include <string>

#include "base/check.h"
#include "fuzz_util.h"
#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using json = nlohmann::ordered_json;
  static const sy::text::ChatInputs inputs{
      .messages = json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
          "arguments": {"x": 1}}}]}, {"role": "tool", "content": "2"}, {"role": "user", "content": [{"type": "text",
          "text": "and?"}]}])"),
      .tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])"),
      .add_generation_prompt = true,
      .kwargs = json::object()};
  try {
    const sy::text::ChatTemplate t(std::string(sy::fuzz::as_text(data, size)), "fuzzed template",
                                   json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
    // Twice: a render must leave nothing behind that changes or breaks the next one.
    const std::string first = t.render(inputs);
    if (t.render(inputs) != first) __builtin_trap();
  } catch (const sy::Error&) {
  }
  return 0;
}
