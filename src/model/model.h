// A loaded model: one forward pass over a batch of sequences (prefill chunks and decode tokens mixed)
// against a paged KV cache, returning logits for the requested rows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
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

// Host-side description of one step. Token i belongs to sequence token_seq[i], sits at positions[i]
// and writes its K/V to slots[i]; block_tables holds each sequence's block ids ([n_seqs, max_blocks]).
struct ForwardBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> token_seq;
  std::vector<int32_t> slots;
  std::vector<int32_t> block_tables;
  int64_t n_seqs = 0;
  int64_t max_blocks = 0;
  std::vector<int32_t> logit_rows;  // token indices whose next-token logits are returned, in this order
  // Attention data parallelism: the dp rank that holds each sequence's KV cache and runs its attention
  // ([n_seqs]; empty: every sequence on dp rank 0). Block ids in block_tables and slots are that dp rank's.
  std::vector<int32_t> seq_dp;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // Collective over every rank of the layout: each rank passes the same batch and receives the same
  // logits. Writes logits [batch.logit_rows.size(), vocab] to host memory `logits`.
  virtual void forward(const ForwardBatch& batch, const KvCacheView& kv, float* logits) = 0;
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
