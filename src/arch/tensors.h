// The checkpoint tensors a model description implies, each with its shape and how it splits over the ranks
// of a stage: what `inspect` and `plan` count (from the config, or by finding each name in the safetensors
// headers). The loader binds the same names and shapes (tests/model/test_planned_bytes.cpp holds the two
// equal, rank by rank).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/model_desc.h"

namespace sy {

// How a tensor splits over a stage's ranks.
enum class TensorRole : uint8_t {
  attn_by_heads,     // query-head rows (q, q_b, kv_b projections, q bias) or o_proj's input columns: over tp
  attn_by_kv_heads,  // k / v projections and biases: ceil(kv_heads / tp) heads per rank
  attn_replicated,   // MLA down-projections and their biases, o_proj bias, the sparse indexer: whole
  norm,              // whole
  router,            // whole: the gate and e_score_correction_bias
  expert,            // one routed expert's matrix: whole experts over ep, the intermediate dimension over etp
  shared_expert,     // the intermediate dimension over dense_tp
  dense_mlp,         // the intermediate dimension over dense_tp
  embedding,         // vocabulary rows over dense_tp, on the first stage (and the last when tied)
  lm_head,           // vocabulary rows over dense_tp, on the last stage
  final_norm,        // the last stage
  nextn,             // multi-token-prediction layers: in the checkpoint, not loaded
};

struct TensorDecl {
  std::string name;  // checkpoint name
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::norm;
  bool matrix = false;  // a linear weight [out, in]: fp8 with one fp32 scale per block when block-quantised
  bool f32 = false;     // fp32 in every checkpoint, whatever the model dtype (e_score_correction_bias)
};

// Decoder layer `layer` (0 <= layer < n_layers), then, for layer >= n_layers, the multi-token-prediction
// layer layer - n_layers (a MoE decoder layer plus its projection, norms and copies of the embedding and
// head, all with role nextn).
std::vector<TensorDecl> layer_tensors(const ModelDesc& d, int64_t layer);
// The embedding, the final norm and (unless tied) the LM head.
std::vector<TensorDecl> global_tensors(const ModelDesc& d);

// The checkpoint name of the weight that the quantisation tensor `name` belongs to (X.weight_scale_inv,
// X.weight_scale, NVFP4's X.weight_scale_2, X.input_scale, INT4's X.weight_packed → X.weight); empty when `name` is
// none of these. (INT4's X.weight_shape is 16 bytes of metadata the loader checks and does not keep: it is not a
// weight's.)
std::string scaled_tensor_name(const std::string& name);

}  // namespace sy
