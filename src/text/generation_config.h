// The end-of-sequence tokens of a model folder, as Hugging Face transformers' generate() stops on them:
// generation_config.json's eos_token_id (else config.json's), plus tokenizer_config.json's eos_token.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace sy::text {

class Tokenizer;

// Sorted, without duplicates; empty when the folders name none. `tokenizer` (may be null) is the one read
// from `tokenizer_dir` and resolves its tokenizer_config.json's eos_token to an id. A malformed file throws
// sy::Error naming it and the key.
std::vector<int32_t> load_eos_token_ids(const std::filesystem::path& model_dir,
                                        const std::filesystem::path& tokenizer_dir, const Tokenizer* tokenizer);

}  // namespace sy::text
