// The points `bench calibrate` times each op at: the shapes of the bench configs and the bundled model (every
// projection, expert set, attention and routing shape, at tensor- and expert-parallel slices) plus generic shapes
// that other models interpolate between. The lists below are the whole grid; extend them here. Also which points
// each pass of a calibration times (PassLedger).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>

#include "apps/bench_calibrate.h"

namespace sy {

namespace {

// Rows, tokens or m of a step: decode batches up to prefill chunks.
const std::vector<int64_t> kRows = {1, 2, 4, 8, 10, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
// The rows the cold ops (weights read from memory each call) are timed at: a decode step's, per rank.
const std::vector<int64_t> kColdRows = {1, 4, 16, 64};
// An expert rank's pairs beyond the caches: under expert parallelism a decode step of 64 sequences sends a rank
// 64 · top_k / ep of them (128 for top 4 over ep 2), a 128-token prompt's prefill 128 · top_k / ep (256, the
// busiest rank more). A query past every point of the cold table falls back to the hot one (cost_model.cpp
// timed_op); one past its own shape's rows only, where these series reach them, is that shape's largest cold
// point scaled by the work (docs/perf-notes.md, twenty-eighth session, variant b).
const std::vector<int64_t> kColdPairs = {1, 4, 16, 64, 128, 256, 512};
// The pools (MiB per rank) a CPU's linear_pool rotates its weights through: from the op's own weights (nothing
// else read between two calls) to past a last-level cache (pool_sizes_mb keeps those from the weights to the
// cold pool).
const std::vector<int64_t> kPoolMb = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
constexpr size_t kPoolRounds = 5;
// Tokens of context per sequence, and the decode batches attention is timed at.
const std::vector<int64_t> kContexts = {128, 512, 1024, 2048, 4096, 8192, 16384};
const std::vector<int64_t> kDecodeSeqs = {1, 2, 4, 8, 10, 16, 32, 64, 128, 256};
const std::vector<int64_t> kPrefillSeqs = {1, 4};
// Tensor-parallel slices of the projections and heads; expert-parallel slices of the experts (local experts
// E/ep, each received pair one row of top_k 1, as moe_forward_parallel calls it); expert-TP slices (inter/etp).
const std::vector<int64_t> kTp = {1, 2, 4, 8};
const std::vector<int64_t> kEp = {2, 4, 8};
const std::vector<int64_t> kEtp = {2, 4, 8};
const std::vector<int64_t> kVocabs = {4096, 32000, 129280, 151936, 163840};

// A model's shapes, from its config.json.
struct ModelShapes {
  std::string source;
  int64_t hidden = 0;
  int64_t n_heads = 0, kv_heads = 0, head_dim = 0;  // GQA (MLA: kv_lora_rank > 0)
  int64_t dense_inter = 0;                          // dense FFN layers (intermediate_size); 0: none
  int64_t shared_inter = 0;                         // shared experts together (n_shared · moe_intermediate_size)
  int64_t n_experts = 0, top_k = 0, moe_inter = 0;
  int64_t vocab = 0;
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope = 0, qk_rope = 0, v_head = 0;  // MLA
  int64_t n_group = 0, topk_group = 0;  // sigmoid group-limited routing; 0: softmax top-k
  bool cpu = false;                     // in the CPU grid too (the CPU runs models up to hidden 2048)
};

const ModelShapes kModels[] = {
    {.source = "models/pydoc-moe (bundled)",
     .hidden = 256,
     .n_heads = 4,
     .kv_heads = 2,
     .head_dim = 64,
     .dense_inter = 1024,
     .n_experts = 8,
     .top_k = 2,
     .moe_inter = 320,
     .vocab = 4096,
     .cpu = true},
    {.source = "bench/configs/qwen3-30b-a3b (and bench/make_qwen3_12layer.py)",
     .hidden = 2048,
     .n_heads = 32,
     .kv_heads = 4,
     .head_dim = 128,
     .dense_inter = 6144,
     .n_experts = 128,
     .top_k = 8,
     .moe_inter = 768,
     .vocab = 151936,
     .cpu = true},
    {.source = "bench/configs/mixtral-8x7b",
     .hidden = 4096,
     .n_heads = 32,
     .kv_heads = 8,
     .head_dim = 128,
     .n_experts = 8,
     .top_k = 2,
     .moe_inter = 14336,
     .vocab = 32000},
    {.source = "bench/configs/kimi-k2-4layers",
     .hidden = 7168,
     .n_heads = 64,
     .dense_inter = 18432,
     .shared_inter = 2048,
     .n_experts = 384,
     .top_k = 8,
     .moe_inter = 2048,
     .vocab = 163840,
     .q_lora_rank = 1536,
     .kv_lora_rank = 512,
     .qk_nope = 128,
     .qk_rope = 64,
     .v_head = 128,
     .n_group = 1,
     .topk_group = 1},
    {.source = "bench/configs/deepseek-v3-6layers",
     .hidden = 7168,
     .n_heads = 128,
     .dense_inter = 18432,
     .shared_inter = 2048,
     .n_experts = 256,
     .top_k = 8,
     .moe_inter = 2048,
     .vocab = 129280,
     .q_lora_rank = 1536,
     .kv_lora_rank = 512,
     .qk_nope = 128,
     .qk_rope = 64,
     .v_head = 128,
     .n_group = 8,
     .topk_group = 4},
};

// Points of a grid, each kept once, in the order first added.
class PointSet {
 public:
  void add(const CalibPoint& p) {
    if (seen_.insert(p).second) points_.push_back(p);
  }
  const std::vector<CalibPoint>& points() const { return points_; }

 private:
  std::set<CalibPoint> seen_;
  std::vector<CalibPoint> points_;
};

std::vector<const ModelShapes*> models_for(Device device) {
  std::vector<const ModelShapes*> out;
  for (const ModelShapes& m : kModels) {
    if (device != Device::cpu || m.cpu) out.push_back(&m);
  }
  return out;
}

// The shapes of a described model (bench calibrate --model).
ModelShapes shapes_of(const ModelDesc& d) {
  const AttentionDesc& a = d.attn;
  const bool mla = a.kind == AttentionKind::mla;
  return {.source = d.architecture,
          .hidden = d.hidden,
          .n_heads = a.n_heads,
          .kv_heads = mla ? 0 : a.kv_heads,
          .head_dim = mla ? 0 : a.head_dim,
          .dense_inter = d.dense_layer_count() > 0 ? d.dense_inter : 0,
          .shared_inter = d.moe.shared_inter,
          .n_experts = d.moe.n_experts,
          .top_k = d.moe.top_k,
          .moe_inter = d.moe.inter,
          .vocab = d.vocab,
          .q_lora_rank = mla ? a.q_lora_rank : 0,
          .kv_lora_rank = mla ? a.kv_lora_rank : 0,
          .qk_nope = mla ? a.qk_nope_head_dim : 0,
          .qk_rope = mla ? a.qk_rope_head_dim : 0,
          .v_head = mla ? a.v_head_dim : 0,
          .n_group = d.moe.scoring == RouterScoring::sigmoid ? d.moe.n_group : 0,
          .topk_group = d.moe.scoring == RouterScoring::sigmoid ? d.moe.topk_group : 0,
          .cpu = true};
}

// The series of an op whose points differ in one leading dim (m, tokens, rows): `fixed` after each value of
// `values`.
void add_row_series(OpGrid& g, const std::vector<CalibPoint>& fixed, const std::vector<int64_t>& values) {
  for (const CalibPoint& f : fixed) {
    std::vector<CalibPoint> s;
    for (int64_t v : values) {
      CalibPoint p{v};
      p.insert(p.end(), f.begin(), f.end());
      s.push_back(p);
    }
    g.series.push_back(std::move(s));
  }
}

// (n, k) of every linear of the models at every tp slice: column-parallel products divide n, row-parallel ones k;
// the KV heads are replicated once tp exceeds them; MLA's latent projections (q_a, kv_a) are replicated.
std::vector<CalibPoint> model_linears(const std::vector<const ModelShapes*>& models) {
  PointSet s;
  for (const ModelShapes* m : models) {
    const int64_t H = m->hidden;
    for (int64_t tp : kTp) {
      if (m->kv_lora_rank == 0) {
        const int64_t heads = m->n_heads / tp, kv = std::max<int64_t>(1, m->kv_heads / tp), hd = m->head_dim;
        s.add({(heads + 2 * kv) * hd, H});  // fused qkv
        s.add({heads * hd, H});             // q
        s.add({kv * hd, H});                // k, v
        s.add({H, heads * hd});             // o
      } else {
        const int64_t heads = m->n_heads / tp;
        s.add({m->q_lora_rank, H});                                  // q_a
        s.add({heads * (m->qk_nope + m->qk_rope), m->q_lora_rank});  // q_b
        s.add({m->kv_lora_rank + m->qk_rope, H});                    // kv_a
        s.add({H, heads * m->v_head});                               // o
      }
      for (int64_t inter : {m->dense_inter, m->shared_inter}) {
        if (inter == 0) continue;
        s.add({2 * inter / tp, H});  // gate_up
        s.add({H, inter / tp});      // down
      }
      s.add({m->vocab / tp, H});  // LM head
    }
  }
  return s.points();
}

// Generic (n, k): n·k from 256K to `max_elems` in steps of 4, square, 4:1 and 1:4.
std::vector<CalibPoint> generic_linears(int64_t max_elems) {
  PointSet s;
  for (int64_t side = 512; side * side <= max_elems; side *= 2) {
    s.add({side, side});
    s.add({2 * side, side / 2});
    s.add({side / 2, 2 * side});
  }
  return s.points();
}

// (n_heads, kv_heads, head_dim) of GQA attention at every tp slice.
std::vector<CalibPoint> gqa_heads(const std::vector<const ModelShapes*>& models) {
  PointSet s;
  for (const ModelShapes* m : models) {
    if (m->kv_lora_rank > 0) continue;
    for (int64_t tp : kTp) {
      if (m->n_heads % tp == 0) s.add({m->n_heads / tp, std::max<int64_t>(1, m->kv_heads / tp), m->head_dim});
    }
  }
  return s.points();
}

// Which of a model's expert sets expert_sets lists.
enum class ExpertSlices : uint8_t { all, whole, parallel };

// (top_k, n_experts, hidden, inter) of the routed experts: whole and at etp slices (inter/etp), and at ep slices
// (E/ep local experts, top_k 1: each received pair one row); `which` keeps the first two (whole), the ep slices
// (parallel) or all three.
std::vector<CalibPoint> expert_sets(const std::vector<const ModelShapes*>& models,
                                    ExpertSlices which = ExpertSlices::all) {
  const bool whole = which != ExpertSlices::parallel, parallel = which != ExpertSlices::whole;
  PointSet s;
  for (const ModelShapes* m : models) {
    if (whole) s.add({m->top_k, m->n_experts, m->hidden, m->moe_inter});
    for (int64_t ep : kEp) {
      if (parallel && m->n_experts % ep == 0) s.add({1, m->n_experts / ep, m->hidden, m->moe_inter});
    }
    for (int64_t etp : kEtp) {
      if (whole) s.add({m->top_k, m->n_experts, m->hidden, m->moe_inter / etp});
    }
  }
  return s.points();
}

// Series over contexts (attention): for each head shape and each seqs count, decode (q_len 1) and prefill
// (q_len = context) points.
void add_attention_series(OpGrid& g, const std::vector<CalibPoint>& heads, const std::vector<int64_t>& decode_seqs,
                          const std::vector<int64_t>& prefill_seqs, const std::vector<int64_t>& contexts) {
  for (const CalibPoint& h : heads) {
    for (int64_t seqs : decode_seqs) {
      std::vector<CalibPoint> s;
      for (int64_t ctx : contexts) s.push_back({seqs, 1, ctx, h[0], h[1], h[2]});
      g.series.push_back(std::move(s));
    }
  }
  for (const CalibPoint& h : heads) {
    for (int64_t seqs : prefill_seqs) {
      std::vector<CalibPoint> s;
      for (int64_t ctx : contexts) s.push_back({seqs, ctx, ctx, h[0], h[1], h[2]});
      g.series.push_back(std::move(s));
    }
  }
}

// Powers of `step` times `from`, up to `to`.
std::vector<int64_t> geometric(int64_t from, int64_t to, int64_t step) {
  std::vector<int64_t> v;
  for (int64_t x = from; x <= to; x *= step) v.push_back(x);
  return v;
}

std::vector<int64_t> up_to(const std::vector<int64_t>& values, int64_t max_value) {
  std::vector<int64_t> v;
  for (int64_t x : values) {
    if (x <= max_value) v.push_back(x);
  }
  return v;
}

// The grid that runs in seconds on a 2-core CPU: every op, a few points each.
std::vector<OpGrid> quick_grid() {
  const std::vector<int64_t> rows = {1, 8, 64};
  std::vector<OpGrid> g;
  const auto op = [&](const std::string& name) -> OpGrid& { return g.emplace_back(OpGrid{.op = name}); };
  add_row_series(op("linear"), {{512, 512}, {512, 256}}, rows);
  add_row_series(op("linear_f32"), {{8, 256}}, {1, 64});
  add_row_series(op("moe_experts"), {{2, 8, 256, 320}, {1, 4, 256, 320}}, {1, 16});
  add_attention_series(op("paged_attention"), {{4, 2, 64}}, {1, 4}, {1}, {128, 512});
  add_row_series(op("qk_norm_rope_kv_write"), {{4, 2, 64}}, {1, 64});
  add_attention_series(op("mla_attention"), {{4, 128, 32}}, {1, 4}, {1}, {128});
  add_row_series(op("head_linear"), {{4, 32, 128}, {4, 128, 32}}, {1, 64});
  add_row_series(op("mla_kv_write"), {{128, 32}}, {1, 64});
  add_row_series(op("rope"), {{4, 64}}, {1, 64});
  add_row_series(op("rms_norm"), {{256}}, {1, 64});
  add_row_series(op("add_rms_norm"), {{256}}, {1, 64});
  add_row_series(op("silu_mul"), {{1024}}, {1, 64});
  op("add").series = {{{256}, {16384}}};
  add_row_series(op("split_columns"), {{512}}, {1, 64});
  add_row_series(op("embedding"), {{256}}, {1, 64});
  add_row_series(op("softmax_topk"), {{8, 2}}, {1, 64});
  add_row_series(op("grouped_topk"), {{16, 4, 4, 2}}, {1, 64});
  add_row_series(op("sample_tokens"), {{4096}}, {1, 8});
  add_row_series(op("sample_tokens_random"), {{4096}}, {1, 8});
  op("copy_to_host").series = {{{4}, {4096}, {1 << 20}}};
  op("copy_to_device").series = {{{4}, {4096}, {1 << 20}}};
  return g;
}

// A sysfs cache size ("300M", "32768K", "2097152"), in bytes; 0 when unreadable.
size_t cache_size_bytes(const std::string& text) {
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (const std::exception&) {
    return 0;
  }
  const char unit = pos < text.size() ? text[pos] : ' ';
  const size_t scale = unit == 'K'   ? size_t{1} << 10
                       : unit == 'M' ? size_t{1} << 20
                       : unit == 'G' ? size_t{1} << 30
                                     : 1;
  return static_cast<size_t>(v) * scale;
}

}  // namespace

HostCaches host_caches() {
  static const HostCaches read = [] {
    HostCaches h{.threads = std::max(1, omp_get_max_threads())};
    // The highest cache level of CPU 0 that holds data (sysfs lists each index's level, type and size).
    int best_level = 0;
    for (int i = 0; i < 8; ++i) {
      const std::filesystem::path dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
      std::ifstream level_in(dir / "level"), type_in(dir / "type"), size_in(dir / "size");
      int level = 0;
      std::string type, size;
      if (!(level_in >> level) || !(type_in >> type) || !(size_in >> size) || type == "Instruction") continue;
      if (level > best_level) best_level = level, h.last_level_bytes = cache_size_bytes(size);
    }
    if (h.last_level_bytes == 0) {
      const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
      h.last_level_bytes = static_cast<size_t>(std::max<long>({l3, l2, 0}));
    }
    return h;
  }();
  return read;
}

size_t cold_pool_bytes(size_t last_level_bytes) {
  constexpr size_t kMib = size_t{1} << 20;
  return std::max(size_t{256} * kMib, (2 * last_level_bytes + kMib - 1) / kMib * kMib);
}

int64_t pool_weight_elems(int threads) { return std::max<int64_t>(int64_t{256} << 10, int64_t{threads} << 16); }

std::vector<int64_t> pool_sizes_mb(const HostCaches& host) {
  const int64_t own = pool_weight_elems(host.threads) * 4 >> 20;  // f32
  const auto pool = static_cast<int64_t>(cold_pool_bytes(host.last_level_bytes) >> 20);
  std::vector<int64_t> v;
  for (int64_t mb : kPoolMb) {
    if (mb >= own && mb <= pool) v.push_back(mb);
  }
  return v;
}

std::vector<OpGrid> calibration_grid(Device device, bool quick, const std::vector<ModelDesc>& described,
                                     const HostCaches& host) {
  if (quick) return quick_grid();
  const bool cpu = device == Device::cpu;
  // The models given, or the built-in ones with generic shapes between them.
  std::vector<ModelShapes> given;
  for (const ModelDesc& d : described) given.push_back(shapes_of(d));
  const bool generic = given.empty();
  std::vector<const ModelShapes*> models = models_for(device);
  if (!generic) {
    models.clear();
    for (const ModelShapes& m : given) models.push_back(&m);
  }
  std::vector<OpGrid> g;
  const auto op = [&](const std::string& name, double weight) -> OpGrid& {
    return g.emplace_back(OpGrid{.op = name, .weight = weight});
  };

  std::vector<CalibPoint> linears = model_linears(models);
  if (generic) {
    for (const CalibPoint& p : generic_linears(cpu ? int64_t{16} << 20 : int64_t{256} << 20)) linears.push_back(p);
  }
  add_row_series(op("linear", 25), linears, kRows);
  // One single-row product of 1 GB of weights on a CPU (the first series, so no budget skips it): no cache holds
  // it, so it gives the rate a rank streams weights from memory at (MachineProfile::stream_bytes_per_s), which
  // the planner holds a step's ops to once the ranks' weights together pass the caches. A model's own shapes may
  // all fit in a large last-level cache (the medium test model's LM head is 65 MB) and time hot.
  if (cpu) g.back().series.insert(g.back().series.begin(), {CalibPoint{1, 131072, 4096}});

  PointSet routers;
  for (const ModelShapes* m : models) routers.add({m->n_experts, m->hidden});
  add_row_series(op("linear_f32", 3), routers.points(), kRows);

  std::vector<CalibPoint> experts = expert_sets(models);
  if (cpu && generic) experts.push_back({8, 64, 1024, 512});  // between the bundled model and Qwen3's hidden 2048
  add_row_series(op("moe_experts", 20), experts, kRows);
  // A CPU's products and experts again with their weights read from memory each call, at a decode step's rows (the
  // planner takes these for a step whose ranks' weights pass the caches, up to the rows timed here).
  if (cpu) {
    add_row_series(op("linear_cold", 8), model_linears(models), kColdRows);
    OpGrid& experts_cold = op("moe_experts_cold", 6);
    add_row_series(experts_cold, expert_sets(models, ExpertSlices::whole), kColdRows);
    add_row_series(experts_cold, expert_sets(models, ExpertSlices::parallel), kColdPairs);
    // The cache curve: a single-row product (256 × 1024) whose weights rotate through a pool of each size, every
    // rank its own pool at once (the planner's share of the way from hot to cold tables for a step's working set).
    // Five rounds of the pools, a fraction of a second each (the planner takes each pool's median): what else the
    // host's caches hold changes from moment to moment (this machine's knee moved from 24-48 MiB to 16-24 between
    // two calibrations minutes apart).
    std::vector<CalibPoint> pools;
    const int64_t n = pool_weight_elems(host.threads) / 1024;
    for (int64_t mb : pool_sizes_mb(host)) pools.push_back({1, n, 1024, mb});
    op("linear_pool", 4).series = std::vector<std::vector<CalibPoint>>(kPoolRounds, pools);
  }

  const std::vector<CalibPoint> heads = gqa_heads(models);
  add_attention_series(op("paged_attention", 18), heads, kDecodeSeqs, kPrefillSeqs, kContexts);
  // A CPU's decode attention again with its KV caches read from memory each call (a step's layers each read their
  // own), at a decode step's sequences per rank: what the planner takes for a step beyond the caches.
  if (cpu) add_attention_series(op("paged_attention_cold", 4), heads, kColdRows, {}, {128, 512, 2048});
  add_row_series(op("qk_norm_rope_kv_write", 3), heads, kRows);

  // MLA: the heads of Kimi K2 (64) and DeepSeek-V3 (128) at tp slices, latent 512 and rope 64 (both models'); the
  // CPU takes a few small head counts.
  std::vector<CalibPoint> mla_heads =
      cpu ? std::vector<CalibPoint>{{16, 512, 64}, {4, 512, 64}}
          : std::vector<CalibPoint>{{128, 512, 64}, {64, 512, 64}, {32, 512, 64}, {16, 512, 64}, {8, 512, 64}};
  // head_linear: MLA's query absorption (in qk_nope, out kv_lora_rank) and output (in kv_lora_rank, out v_head),
  // 128 and 512 in both built-in MLA models; mla_kv_write: (kv_lora_rank, rope).
  PointSet head_linears, kv_writes;
  for (const CalibPoint& h : mla_heads) {
    head_linears.add({h[0], 128, h[1]});
    head_linears.add({h[0], h[1], 128});
  }
  kv_writes.add({512, 64});
  if (!generic) {
    // The given models' at every tp slice (none: no MLA op is timed).
    PointSet heads_of, linears_of, writes_of;
    for (const ModelShapes* m : models) {
      if (m->kv_lora_rank == 0) continue;
      writes_of.add({m->kv_lora_rank, m->qk_rope});
      for (int64_t tp : kTp) {
        if (m->n_heads % tp != 0) continue;
        const int64_t h = m->n_heads / tp;
        heads_of.add({h, m->kv_lora_rank, m->qk_rope});
        linears_of.add({h, m->qk_nope, m->kv_lora_rank});
        linears_of.add({h, m->kv_lora_rank, m->v_head});
      }
    }
    mla_heads = heads_of.points();
    head_linears = linears_of;
    kv_writes = writes_of;
  }
  add_attention_series(op("mla_attention", 10), mla_heads, cpu ? std::vector<int64_t>{1, 8, 64} : kDecodeSeqs, {1},
                       kContexts);
  add_row_series(op("head_linear", 3), head_linears.points(), kRows);
  add_row_series(op("mla_kv_write", 1), kv_writes.points(), kRows);

  PointSet ropes, widths, norms, inters, softmax, grouped;
  for (const CalibPoint& h : heads) {
    ropes.add({h[0], h[2]});
    widths.add({(h[0] + 2 * h[1]) * h[2]});
  }
  for (const ModelShapes* m : models) {
    norms.add({m->hidden});
    if (m->q_lora_rank > 0) norms.add({m->q_lora_rank});
    for (int64_t tp : kTp) {
      for (int64_t inter : {m->dense_inter, m->shared_inter}) {
        if (inter > 0) inters.add({inter / tp});
      }
    }
    if (m->n_group == 0) softmax.add({m->n_experts, m->top_k});
    if (m->n_group > 0) grouped.add({m->n_experts, m->top_k, m->n_group, m->topk_group});
  }
  for (int64_t dim : {1024, 4096}) norms.add({dim});
  for (const CalibPoint& p : {CalibPoint{64, 8}, CalibPoint{256, 8}}) softmax.add(p);
  if (cpu) grouped.add({256, 8, 8, 4});
  grouped.add({16, 4, 4, 2});  // the DeepSeek-V3 test fixture's
  add_row_series(op("rope", 1), ropes.points(), kRows);
  add_row_series(op("rms_norm", 2), norms.points(), kRows);
  add_row_series(op("add_rms_norm", 2), norms.points(), kRows);
  add_row_series(op("silu_mul", 2), inters.points(), kRows);
  op("add", 1).series = {[&] {
    std::vector<CalibPoint> s;
    for (int64_t n : geometric(256, cpu ? int64_t{16} << 20 : int64_t{64} << 20, 2)) s.push_back({n});
    return s;
  }()};
  add_row_series(op("split_columns", 1), widths.points(), kRows);
  PointSet dims;
  for (const ModelShapes* m : models) dims.add({m->hidden});
  add_row_series(op("embedding", 1), dims.points(), kRows);
  add_row_series(op("softmax_topk", 1), softmax.points(), kRows);
  add_row_series(op("grouped_topk", 1), grouped.points(), kRows);

  // Sampling: rows up to 4096 (a step samples one row per sequence).
  PointSet vocabs;
  for (int64_t v : kVocabs) {
    if (!cpu || v == 4096 || v == 151936) vocabs.add({v});
  }
  add_row_series(op("sample_tokens", 2), vocabs.points(), up_to(kRows, 4096));
  add_row_series(op("sample_tokens_random", 2), vocabs.points(), up_to(kRows, 4096));

  std::vector<CalibPoint> copies;
  for (int64_t b : geometric(4, cpu ? int64_t{64} << 20 : int64_t{256} << 20, 4)) copies.push_back({b});
  op("copy_to_host", 1).series = {copies};
  op("copy_to_device", 1).series = {copies};
  return g;
}

PassLedger::Turn PassLedger::turn(const std::string& op, const CalibPoint& point) const {
  const auto it = cost_.find({op, point});
  if (it == cost_.end()) return Turn::first;
  return it->second >= 0 && it->second <= kRetimeMaxSeconds ? Turn::again : Turn::leave;
}

void PassLedger::timed(const std::string& op, const CalibPoint& point, double seconds) {
  cost_.try_emplace({op, point}, std::max(0.0, seconds));
}

void PassLedger::close(const std::string& op, const CalibPoint& point) { cost_[{op, point}] = -1; }

double first_pass_share(int passes) {
  constexpr double kRetimeShare = 0.2;
  return 1.0 / (1.0 + kRetimeShare * std::max(0, passes - 1));
}

std::vector<std::vector<int32_t>> expert_rotations(const std::vector<int32_t>& ids, int64_t n_experts, int64_t top_k) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t r = 0; r < n_experts / std::gcd(n_experts, top_k); ++r) {
    std::vector<int32_t>& rotated = out.emplace_back(ids);
    for (int32_t& e : rotated) e = static_cast<int32_t>((e + r * top_k) % n_experts);
  }
  return out;
}

}  // namespace sy
