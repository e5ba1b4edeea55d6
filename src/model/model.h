// A loaded model: the forward of this rank's part of the layout over a batch of sequences (prefill chunks
// and decode tokens mixed) against a paged KV cache, on the device.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/blocks/step.h"
#include "model/parallel.h"
#include "parallel/groups.h"

namespace sy {

// Per-layer shape of the paged KV cache the model expects. Multi-head latent attention (model/blocks/mla.h)
// keeps one row per token, [compressed latent | rope key], as a single K head with no V.
struct KvGeometry {
  int64_t n_layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;        // K row per head
  int64_t v_head_dim = 0;      // V row per head; 0: no V cache (MLA)
  int64_t index_head_dim = 0;  // the sparse-attention indexer's key per token (DeepSeek-V3.2, GLM-5); 0: none
};

// Bytes a forward pass must read, by part, in the backend's storage types: the basis of the memory
// floor that `switchyard bench latency` reports.
struct ReadCost {
  double always_bytes = 0;         // every step: attention, dense MLPs, shared experts, routers, norms, LM head
  double embedding_row_bytes = 0;  // per token: its embedding row
  struct MoeLayer {
    int64_t n_experts = 0;
    int64_t top_k = 0;
    double expert_bytes = 0;  // one expert's gate, up and down
  };
  std::vector<MoeLayer> moe_layers;
  double kv_bytes_per_token = 0;       // all layers, K and V
  double active_params_per_token = 0;  // multiply-adds per token outside attention scores
  int64_t attn_heads_x_dims = 0;       // Σ over layers of n_heads · (head_dim + v_head_dim): attention-score FLOPs/2
};

struct ModelInfo {
  std::string architecture;  // HF class, e.g. "Qwen3MoeForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t n_layers = 0;  // layers actually built (after --layers)
  int64_t max_position_embeddings = 0;
  KvGeometry kv;            // this rank's cache: its pipeline stage's layers, its tp share of KV heads
  int dp_size = 1;          // attention data parallelism: the engine keeps one KV block pool per dp rank
  size_t weight_bytes = 0;  // device bytes held by weights
  ReadCost cost;
};

// Device memory of the paged KV cache for every layer (backend kv_dtype()): slot = block * block_size + offset.
struct KvCacheView {
  std::vector<void*> k;        // per layer: [n_blocks * block_size, kv_heads, head_dim]
  std::vector<void*> v;        // per layer: [n_blocks * block_size, kv_heads, v_head_dim]; null when v_head_dim is 0
  std::vector<void*> index_k;  // per layer: [n_blocks * block_size, index_head_dim]; empty when there is no indexer
  int64_t block_size = 0;
  int64_t n_blocks = 0;
};

// The device-side input of one forward over this rank's pipeline stage: one micro-batch of the sequences
// of this rank's dp rank, its index arrays already on the device. The runtime's executor builds it from
// the host batch (runtime/executor.h).
struct StepInput {
  StepContext step;                     // T = step.tokens: positions, sequence ids, slots, block tables
  const int32_t* vocab_rows = nullptr;  // device [T]: each token's row in vocab_share(); its count for others'
  std::span<const int32_t> tokens;      // host [T]: the token ids (a dense_tp group spanning dp gathers them)
  const int32_t* logit_rows = nullptr;  // device [R]: the tokens whose next-token logits the last stage computes
  int64_t n_logit_rows = 0;             // R
};

// A device buffer that crosses a pipeline stage boundary: what a stage sends the next one.
struct StageTensor {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::f32;
};

// The logits [R, vocab] of the last stage's forward, valid until the next one: on the device when this rank
// computes every vocabulary row, else assembled on the host from the dense_tp group's shares.
struct StepLogits {
  const float* device = nullptr;
  const float* host = nullptr;
};

// A loaded model on one rank: a pure forward of its pipeline stage over a batch on the device, with its
// layout's collectives inside (tensor, expert and dense parallel). Uploading a batch, cutting it into
// micro-batches, moving the stage boundary, capturing steps and assembling logits across dp and pp ranks
// are the runtime's executor's.
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // The layout this rank runs its part of (one rank: the trivial plan).
  virtual const ShardPlan& plan() const = 0;
  // This rank's rows of the vocabulary (embedding and LM head are split over dense_tp).
  virtual Share vocab_share() const = 0;
  // The buffers a stage of `tokens` tokens receives from the previous stage before forward (not on the first
  // stage) and sends to the next after it (not on the last): the hidden state, and what the layers of the
  // next stage reuse. Each is the buffer forward reads or writes for that many tokens.
  virtual std::vector<StageTensor> stage_boundary(int64_t tokens) = 0;
  // This rank's stage over one micro-batch (possibly of no tokens: the rank still serves its experts and its
  // dense_tp group). Collective over the ranks of this stage. Returns the logits of in.logit_rows on the
  // last stage (nothing elsewhere).
  virtual StepLogits forward(const StepInput& in, const KvCacheView& kv) = 0;
  // Whether forward over `tokens` tokens stays on the device (no host round trip), so that it can be captured
  // and replayed where the backend can.
  virtual bool capturable(int64_t tokens) const = 0;
  // Changes whenever the model's scratch is reallocated (which makes captured steps stale).
  virtual uint64_t scratch_generation() const = 0;
  // With LoadOptions::check_finite, each forward checks the output of every block on this rank (embedding,
  // each layer's attention and FFN, the LM head) and first_nonfinite() names the first that held a NaN or
  // an infinity in the last forward ("layer 3 FFN output"; empty: all finite). Without it, nothing is
  // checked and checks_finite() is false.
  virtual bool checks_finite() const { return false; }
  virtual std::string first_nonfinite() const { return ""; }
};

struct LoadOptions {
  std::filesystem::path dir;    // Hugging Face model folder
  bool random_weights = false;  // only config.json is read
  uint64_t seed = 0;            // random weights
  int64_t max_layers = 0;       // > 0: keep only the first max_layers layers
  // The layout this rank runs a part of (weights sharded, collectives over its groups); null: one rank.
  // Must outlive the model.
  const ParallelGroups* parallel = nullptr;
  // A debug mode: check every block's output for NaN and infinities (a host round trip per block, and no
  // captured steps), so that a non-finite step can be traced to the layer that produced it.
  bool check_finite = false;
};

// Reads config.json, picks the architecture, binds every weight. Throws sy::Error on bad input.
std::unique_ptr<Model> load_model(const LoadOptions& options, Backend& backend);

// Every check load_model makes, without allocating or reading any weight: the architecture, the config's
// values, and (unless config_only) every checkpoint tensor's name, shape and dtype, none missing or extra.
// Throws sy::Error as load_model does. For the commands that only read headers (inspect, plan).
void check_model(const std::filesystem::path& dir, bool config_only);

}  // namespace sy
