// The sparse-attention indexer of DeepSeek-V3.2 and GLM-5 (DSA): per query, a cheap multi-head score over
// the sequence's keys picks the top index_topk of them, and MLA then attends only to those. Its key per
// token (index_head_dim, after LayerNorm and rope) lives in the KV cache next to the MLA latent.
#pragma once

#include <cstdint>
#include <string>

#include "model/blocks/attention.h"
#include "model/blocks/step.h"
#include "model/weights.h"

namespace sy {

struct IndexerConfig {
  int64_t hidden = 0;
  int64_t q_lora_rank = 0;        // the indexer's queries come from MLA's normalised q_a_proj output
  int64_t n_heads = 0;            // index_n_heads
  int64_t head_dim = 0;           // index_head_dim; its first rope_dim dims rotate
  int64_t rope_dim = 0;           // qk_rope_head_dim
  int64_t top_k = 0;              // index_topk
  bool rope_interleaved = false;  // GLM-5: adjacent pairs; DeepSeek-V3.2: rotate-half
  // GLM-5 "shared" layers reuse the selection of the previous full layer in the same step: no weights of
  // their own, and no indexer keys written.
  bool shared = false;
};

struct IndexerWeights {
  WeightPtr wq_b = nullptr;          // [n_heads * head_dim, q_lora_rank]
  WeightPtr wk = nullptr;            // [head_dim, hidden]
  WeightPtr k_norm = nullptr;        // [head_dim] LayerNorm weight
  WeightPtr k_norm_bias = nullptr;   // [head_dim] LayerNorm bias
  WeightPtr weights_proj = nullptr;  // [n_heads, hidden]
};

// Binds prefix + {wq_b, wk, k_norm, weights_proj} (nothing for a shared layer).
IndexerWeights bind_indexer(WeightLoader& loader, const std::string& prefix, const IndexerConfig& c);

// Writes this step's indexer keys to index_cache ([n_slots, head_dim]) and returns device [T, top_k] key
// positions per query (ascending, -1 past the end). x: [T, hidden] the layer input; q_resid: [T, q_lora_rank].
// A shared layer returns the previous full layer's selection (the same scratch buffer; a full layer runs first).
// The buffer where indexer_select leaves a step's selection ([tokens, top_k]): a pipeline stage whose first
// layer shares the previous stage's selection receives it here.
int32_t* indexer_selection(Scratch& scratch, int64_t tokens, int64_t top_k);

const int32_t* indexer_select(const StepContext& step, Scratch& scratch, const IndexerConfig& c,
                              const IndexerWeights& w, const RopeView& rope, const float* x, const float* q_resid,
                              void* index_cache);

}  // namespace sy
