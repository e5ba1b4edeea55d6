// libFuzzer: config.json as every command reads it: parsed, described (the architecture's keys, ranges and
// size bounds), its tensors declared and sized as inspect and plan size them, and its rope settings.
#include <string>

#include "arch/model_desc.h"
#include "arch/tensors.h"
#include "base/check.h"
#include "fuzz_util.h"
#include "planner/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const sy::ConfigJson cfg = sy::ConfigJson::parse(std::string(sy::fuzz::as_text(data, size)), "config.json");
    (void)cfg.rope(10000.0);
    const sy::ModelDesc desc = sy::describe_model(cfg);
    // Sizing every expert of a large config is what plan does; a fuzzed config is cut to two layers so one
    // input stays fast (the size bounds themselves were checked by describe_model on the whole config).
    const sy::ModelDesc cut = desc.truncated(2);
    const sy::WeightTable table = sy::weights_from_config(cut);
    volatile int64_t sink = table.total().bytes + cut.kv_bytes_per_token_layer(1, 2);
    (void)sink;
  } catch (const sy::Error&) {
  }
  return 0;
}
