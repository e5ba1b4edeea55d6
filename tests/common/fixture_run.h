// Test helper: a conformance fixture's prompts through the engine as the conformance tests run them (blocks of 4,
// prefill chunks of 8 tokens; the greedy prompt generates the fixture's greedy tokens, the others one token), every
// result with its logits, in prompt order.
#pragma once

#include <cstdint>
#include <vector>

#include "common/fixture.h"
#include "runtime/engine.h"

namespace sy::test {

inline std::vector<RequestResult> run_fixture_prompts(const Fixture& f, Model& model, Backend& backend) {
  Engine engine(model, backend, {.block_size = 4, .kv_blocks = 64, .scheduler = {.max_batch_tokens = 8}});
  std::vector<int64_t> ids;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    const bool greedy = static_cast<int>(i) == f.greedy_prompt;
    ids.push_back(engine.add({.prompt = f.prompts[i],
                              .max_new_tokens = greedy ? static_cast<int64_t>(f.greedy_tokens.size()) : 1,
                              .keep_logits = true}));
  }
  engine.run();
  std::vector<RequestResult> out;
  for (int64_t id : ids) out.push_back(engine.result(id));
  return out;
}

}  // namespace sy::test
