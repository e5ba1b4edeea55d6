// libFuzzer: a request body as the server's OpenAI routes read it. The first byte picks the route
// (completions, chat, tokenize, detokenize); the rest is the body. Bad bodies may only be refused with
// ApiError (a 4xx with an OpenAI error body); any other exception would be a 500.
#include <string>

#include "base/check.h"
#include "fuzz_util.h"
#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(sy::fuzz::as_text(data + 1, size - 1));
  try {
    const nlohmann::ordered_json j = sy::server::parse_body(body);
    switch (data[0] % 4) {
      case 0: {
        const sy::server::CompletionRequest r = sy::server::parse_completion_request(j);
        (void)sy::server::check_context(static_cast<int64_t>(r.prompt_texts.size()), r.sampling.max_tokens, 4096);
        break;
      }
      case 1:
        (void)sy::server::parse_chat_request(j);
        break;
      case 2:
        (void)sy::server::parse_tokenize_request(j);
        break;
      default:
        (void)sy::server::parse_detokenize_request(j);
        break;
    }
  } catch (const sy::server::ApiError&) {
  }
  return 0;
}
