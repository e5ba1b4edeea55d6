// libFuzzer: tokenizer.json as Tokenizer::load reads a tokenizer folder (model, normalizer, pre-tokenizer,
// decoder, added tokens); a tokenizer it accepts then encodes and decodes a fixed text.
#include "base/check.h"
#include "fuzz_util.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sy::fuzz::write_input("tokenizer.json", data, size);
  try {
    const sy::text::Tokenizer t = sy::text::Tokenizer::load(sy::fuzz::scratch_dir());
    const std::vector<int32_t> ids = t.encode("Hello, wörld! 123 <|im_start|> \xe4\xbd\xa0\xe5\xa5\xbd  \n\tx");
    volatile size_t sink = t.decode(ids).size();
    (void)sink;
  } catch (const sy::Error&) {
  }
  return 0;
}
