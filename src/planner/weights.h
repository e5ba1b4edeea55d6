// Weight bytes and parameter counts of a model by part and by how each part splits over ranks, from
// safetensors headers (never tensor data) or from the config alone; and the share one rank holds.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "arch/model_desc.h"
#include "io/safetensors.h"
#include "parallel/mapping.h"

namespace sy {

enum class Part : uint8_t {
  attention,
  norms,
  router,
  experts,
  shared_experts,
  dense_mlp,
  embedding,
  lm_head,
  nextn,
  other
};
inline constexpr int kPartCount = 10;
std::string_view part_name(Part p);  // "attention", "shared experts", ...

// Bytes and parameters (elements, not counting fp8 scale tensors).
struct Amount {
  int64_t bytes = 0;
  int64_t params = 0;
  // Of `bytes`, those every shard of a split weight holds whole: NVFP4's per-tensor scales (weight_scale_2,
  // input_scale), which a rank keeps in full whatever share of the weight it holds.
  int64_t whole_bytes = 0;
  // Of `params`, those stored quantised: the linear weights a checkpoint holds in FP8, INT4 or NVFP4.
  int64_t quantised_params = 0;
  Amount& operator+=(const Amount& o) {
    bytes += o.bytes;
    params += o.params;
    whole_bytes += o.whole_bytes;
    quantised_params += o.quantised_params;
    return *this;
  }
  bool operator==(const Amount&) const = default;
};

// One decoder layer, by how each piece splits over the ranks of a stage.
struct LayerWeights {
  Amount attn_by_heads;     // q / q_b / kv_b projections (and q bias) split over query heads, o_proj by its input
  Amount attn_by_kv_heads;  // k / v projections and biases: ceil(kv_heads/tp) heads per rank
  Amount attn_replicated;   // MLA down-projections (q_a, kv_a), o_proj bias, sparse-attention indexer
  Amount norms;             // replicated
  Amount router;            // replicated: gate weight, e_score_correction_bias
  Amount experts;           // every routed expert: whole experts over ep, each one's intermediate over etp
  Amount shared_experts;    // intermediate over dense_tp
  Amount dense_mlp;         // intermediate over dense_tp
  Amount other;             // tensors no rule recognises: replicated, and listed by inspect
  bool operator==(const LayerWeights&) const = default;
};

struct WeightTable {
  std::vector<LayerWeights> layers;  // [n_layers]
  Amount embedding;
  Amount lm_head;  // zero when tied: the last stage holds a copy of the embedding
  Amount final_norm;
  Amount nextn;  // multi-token-prediction layers: in the checkpoint, not loaded
  Amount other;  // global tensors no rule recognises
  bool tied = false;
  std::vector<std::string> unrecognised;  // names of the tensors counted as "other"

  std::array<Amount, kPartCount> by_part() const;  // whole model
  Amount total() const;
  Amount active_per_token(const ModelDesc& shape) const;  // routed experts counted top_k / n_experts
  bool operator==(const WeightTable&) const = default;
};

// From the config: the tensors the checkpoint of that architecture holds, with the config's dtype (fp8
// plus one fp32 scale per block for block-quantised linear weights). sy::Error for other quantisations.
WeightTable weights_from_config(const ModelDesc& shape);
// From the safetensors headers of a checkpoint; tensor names are classified into parts.
WeightTable weights_from_checkpoint(const ModelDesc& shape, const Checkpoint& checkpoint);

struct ShardOptions {
  bool vocab_parallel = true;     // embedding and LM head split by vocabulary rows over dense_tp
  int64_t redundant_experts = 0;  // extra expert replicas per MoE layer (EPLB), spread over ep
};

// Bytes one rank of `sizes` holds for the decoder layers [first_layer, first_layer + n_layers) of its
// stage, plus the embedding on the first stage and the LM head and final norm on the last.
std::array<int64_t, kPartCount> rank_weight_bytes(const WeightTable& table, const ModelDesc& shape,
                                                  const ParallelSizes& sizes, int64_t first_layer, int64_t n_layers,
                                                  bool first_stage, bool last_stage, const ShardOptions& options);

}  // namespace sy
