// bench_kernels: times each CPU kernel against its scalar reference on random inputs of model-like sizes
// and prints a table (median of runs after a warm-up, with the cpu kernel's achieved GFLOP/s and GB/s).
// With --cuda-moe (CUDA builds): the routed-experts paths alone on the GPU instead; with
// --cuda-attention the GQA attention kernels; with --cuda-fp8 the block-FP8 products (bench_fp8.cpp).
// A benchmark, not a test: it asserts nothing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

#ifdef SY_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cstring>
#include <set>

#include "kernels/cuda/ops.cuh"
#endif

namespace sy {
#ifdef SY_WITH_CUDA
void bench_cuda_fp8();  // bench_fp8.cpp
#endif
namespace {

std::mt19937 g_rng(2024);

std::vector<float> random_normal(int64_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    x = dist(g_rng);
  }
  return v;
}

// Median wall time in ms of `run` after one warm-up call; repeats until ~0.3 s spent (3 to 25 runs).
double median_ms(const std::function<void()>& run) {
  run();
  std::vector<double> times;
  double total = 0.0;
  while (times.size() < 3 || (times.size() < 25 && total < 300.0)) {
    const auto start = std::chrono::steady_clock::now();
    run();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    times.push_back(ms);
    total += ms;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Case {
  std::string op, shape;
  double flops, bytes;  // of one call: arithmetic, and the minimum bytes read plus written
  std::function<void(bool use_cpu)> run;
};

void report(const Case& c) {
  const double ref_ms = median_ms([&] { c.run(false); });
  const double cpu_ms = median_ms([&] { c.run(true); });
  std::printf("| %-15s | %-34s | %10.3f | %9.3f | %8.1fx | %8.2f | %8.2f |\n", c.op.c_str(), c.shape.c_str(), ref_ms,
              cpu_ms, ref_ms / cpu_ms, c.flops / cpu_ms * 1e-6, c.bytes / cpu_ms * 1e-6);
  std::fflush(stdout);
}

Case linear_case(int64_t m, int64_t n, int64_t k) {
  auto x = std::make_shared<std::vector<float>>(random_normal(m * k));
  auto w = std::make_shared<std::vector<float>>(random_normal(n * k));
  auto b = std::make_shared<std::vector<float>>(random_normal(n));
  auto y = std::make_shared<std::vector<float>>(size_t(m * n));
  return {"linear", "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k),
          2.0 * double(m * n * k), 4.0 * double(m * k + n * k + n + m * n), [=](bool use_cpu) {
            (use_cpu ? cpu::linear : ref::linear)(x->data(), w->data(), b->data(), y->data(), m, n, k);
          }};
}

Case rms_norm_case(int64_t rows, int64_t dim) {
  auto x = std::make_shared<std::vector<float>>(random_normal(rows * dim));
  auto w = std::make_shared<std::vector<float>>(random_normal(dim));
  auto y = std::make_shared<std::vector<float>>(size_t(rows * dim));
  return {"rms_norm", "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim), 4.0 * double(rows * dim),
          4.0 * double(2 * rows * dim + dim), [=](bool use_cpu) {
            (use_cpu ? cpu::rms_norm : ref::rms_norm)(x->data(), w->data(), y->data(), rows, dim, 1e-6f);
          }};
}

Case add_rms_norm_case(int64_t rows, int64_t dim) {
  auto res = std::make_shared<std::vector<float>>(random_normal(rows * dim));
  auto x = std::make_shared<std::vector<float>>(random_normal(rows * dim));
  auto w = std::make_shared<std::vector<float>>(random_normal(dim));
  auto y = std::make_shared<std::vector<float>>(size_t(rows * dim));
  // The residual grows by x on every call; after a few dozen calls it is still far from overflow.
  return {"add_rms_norm", "rows=" + std::to_string(rows) + " dim=" + std::to_string(dim), 5.0 * double(rows * dim),
          4.0 * double(4 * rows * dim + dim), [=](bool use_cpu) {
            (use_cpu ? cpu::add_rms_norm : ref::add_rms_norm)(res->data(), x->data(), w->data(), y->data(), rows, dim,
                                                              1e-6f);
          }};
}

Case embedding_case(int64_t vocab, int64_t dim, int64_t tokens) {
  auto table = std::make_shared<std::vector<float>>(random_normal(vocab * dim));
  auto ids = std::make_shared<std::vector<int32_t>>(size_t(tokens));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
  for (int32_t& id : *ids) {
    id = pick(g_rng);
  }
  auto out = std::make_shared<std::vector<float>>(size_t(tokens * dim));
  return {"embedding",
          "vocab=" + std::to_string(vocab) + " dim=" + std::to_string(dim) + " t=" + std::to_string(tokens), 0.0,
          4.0 * double(2 * tokens * dim), [=](bool use_cpu) {
            (use_cpu ? cpu::embedding : ref::embedding)(table->data(), ids->data(), out->data(), tokens, dim);
          }};
}

Case silu_mul_case(int64_t rows, int64_t inter) {
  auto gate_up = std::make_shared<std::vector<float>>(random_normal(rows * 2 * inter));
  auto out = std::make_shared<std::vector<float>>(size_t(rows * inter));
  return {"silu_mul", "rows=" + std::to_string(rows) + " inter=" + std::to_string(inter), 5.0 * double(rows * inter),
          4.0 * double(3 * rows * inter),
          [=](bool use_cpu) { (use_cpu ? cpu::silu_mul : ref::silu_mul)(gate_up->data(), out->data(), rows, inter); }};
}

Case rope_case(int64_t tokens, int64_t heads, int64_t head_dim) {
  auto x = std::make_shared<std::vector<float>>(random_normal(tokens * heads * head_dim));
  auto inv_freq = std::make_shared<std::vector<float>>(size_t(head_dim / 2));
  for (size_t i = 0; i < inv_freq->size(); ++i) {
    (*inv_freq)[i] = std::pow(10000.0f, -float(2 * i) / float(head_dim));
  }
  auto positions = std::make_shared<std::vector<int32_t>>(size_t(tokens));
  std::iota(positions->begin(), positions->end(), 1000);
  const RopeArgs args{.x = x->data(),
                      .positions = positions->data(),
                      .inv_freq = inv_freq->data(),
                      .tokens = tokens,
                      .heads = heads,
                      .head_dim = head_dim,
                      .rotary_dim = head_dim};
  return {"rope", "t=" + std::to_string(tokens) + " heads=" + std::to_string(heads) + " hd=" + std::to_string(head_dim),
          3.0 * double(tokens * heads * head_dim), 4.0 * double(2 * tokens * heads * head_dim),
          [x, inv_freq, positions, args](bool use_cpu) { (use_cpu ? cpu::rope : ref::rope)(args); }};
}

Case kv_write_case(int64_t tokens, int64_t kv_heads, int64_t head_dim, int64_t n_slots) {
  auto k = std::make_shared<std::vector<float>>(random_normal(tokens * kv_heads * head_dim));
  auto v = std::make_shared<std::vector<float>>(random_normal(tokens * kv_heads * head_dim));
  auto k_cache = std::make_shared<std::vector<float>>(random_normal(n_slots * kv_heads * head_dim));
  auto v_cache = std::make_shared<std::vector<float>>(random_normal(n_slots * kv_heads * head_dim));
  auto slots = std::make_shared<std::vector<int32_t>>(size_t(n_slots));
  std::iota(slots->begin(), slots->end(), 0);
  std::shuffle(slots->begin(), slots->end(), g_rng);
  const KvWriteArgs args{.k = k->data(),
                         .v = v->data(),
                         .slots = slots->data(),
                         .k_cache = k_cache->data(),
                         .v_cache = v_cache->data(),
                         .tokens = tokens,
                         .kv_heads = kv_heads,
                         .head_dim = head_dim,
                         .v_head_dim = head_dim};
  return {"kv_write",
          "t=" + std::to_string(tokens) + " kv_heads=" + std::to_string(kv_heads) + " hd=" + std::to_string(head_dim),
          0.0, 4.0 * double(4 * tokens * kv_heads * head_dim),
          [k, v, k_cache, v_cache, slots, args](bool use_cpu) { (use_cpu ? cpu::kv_write : ref::kv_write)(args); }};
}

// n_seqs sequences of `length` tokens in shuffled blocks of 16; the last `queries` positions of each query.
Case attention_case(int64_t n_seqs, int64_t length, int64_t queries, int64_t n_heads, int64_t kv_heads,
                    int64_t head_dim) {
  const int64_t block_size = 16, max_blocks = (length + block_size - 1) / block_size;
  const int64_t n_slots = n_seqs * max_blocks * block_size, tokens = n_seqs * queries;
  auto block_tables = std::make_shared<std::vector<int32_t>>(size_t(n_seqs * max_blocks));
  std::iota(block_tables->begin(), block_tables->end(), 0);
  std::shuffle(block_tables->begin(), block_tables->end(), g_rng);
  auto token_seq = std::make_shared<std::vector<int32_t>>();
  auto positions = std::make_shared<std::vector<int32_t>>();
  double visible_keys = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t p = length - queries; p < length; ++p) {
      token_seq->push_back(int32_t(s));
      positions->push_back(int32_t(p));
      visible_keys += double(p + 1);
    }
  }
  auto q = std::make_shared<std::vector<float>>(random_normal(tokens * n_heads * head_dim));
  auto k_cache = std::make_shared<std::vector<float>>(random_normal(n_slots * kv_heads * head_dim));
  auto v_cache = std::make_shared<std::vector<float>>(random_normal(n_slots * kv_heads * head_dim));
  auto out = std::make_shared<std::vector<float>>(size_t(tokens * n_heads * head_dim));
  const PagedAttentionArgs args{.q = q->data(),
                                .k_cache = k_cache->data(),
                                .v_cache = v_cache->data(),
                                .block_tables = block_tables->data(),
                                .token_seq = token_seq->data(),
                                .positions = positions->data(),
                                .out = out->data(),
                                .tokens = tokens,
                                .n_heads = n_heads,
                                .kv_heads = kv_heads,
                                .head_dim = head_dim,
                                .v_head_dim = head_dim,
                                .block_size = block_size,
                                .max_blocks = max_blocks,
                                .scale = 1.0f / std::sqrt(float(head_dim))};
  return {"paged_attention",
          "seqs=" + std::to_string(n_seqs) + " len=" + std::to_string(length) + " q=" + std::to_string(queries) +
              " h=" + std::to_string(n_heads) + "/" + std::to_string(kv_heads) + " hd=" + std::to_string(head_dim),
          4.0 * visible_keys * double(n_heads * head_dim),
          4.0 * double(2 * n_seqs * length * kv_heads * head_dim + 2 * tokens * n_heads * head_dim),
          [q, k_cache, v_cache, block_tables, token_seq, positions, out, args](bool use_cpu) {
            (use_cpu ? cpu::paged_attention : ref::paged_attention)(args);
          }};
}

Case softmax_topk_case(int64_t tokens, int64_t n_experts, int64_t top_k) {
  auto logits = std::make_shared<std::vector<float>>(random_normal(tokens * n_experts));
  auto ids = std::make_shared<std::vector<int32_t>>(size_t(tokens * top_k));
  auto weights = std::make_shared<std::vector<float>>(size_t(tokens * top_k));
  const SoftmaxTopkArgs args{.logits = logits->data(),
                             .expert_ids = ids->data(),
                             .weights = weights->data(),
                             .tokens = tokens,
                             .n_experts = n_experts,
                             .top_k = top_k,
                             .renormalize = true};
  return {"softmax_topk",
          "t=" + std::to_string(tokens) + " experts=" + std::to_string(n_experts) + " k=" + std::to_string(top_k),
          3.0 * double(tokens * n_experts), 4.0 * double(tokens * n_experts + 2 * tokens * top_k),
          [logits, ids, weights, args](bool use_cpu) { (use_cpu ? cpu::softmax_topk : ref::softmax_topk)(args); }};
}

#ifdef SY_WITH_CUDA
// Device allocations freed together.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena() {
    for (void* p : ptrs_) cudaFree(p);
  }
  template <typename T>
  T* get(int64_t count) {
    void* p = nullptr;
    cuda::check_cuda(cudaMalloc(&p, size_t(count) * sizeof(T)), "cudaMalloc");
    ptrs_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* put(const std::vector<T>& host) {
    T* p = get<T>(int64_t(host.size()));
    cuda::check_cuda(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    return p;
  }

 private:
  std::vector<void*> ptrs_;
};

void bench_cuda_moe_small(const cuda::bf16_bits* gate_up, const cuda::bf16_bits* down, cudaStream_t s);

// The grouped expert path (dispatch, gate_up and down GEMMs, combine) on the Qwen3-30B-A3B expert
// shapes (128 experts, top 8, hidden 2048, inter 768) with uniform random routing, for every tile
// height (* marks the one moe_grouped_tile_m picks): device-event medians of 20 runs after 3 warm-ups,
// random bf16 weights (1.2 GB, far past the L2). GB/s counts the weights of the experts the routing
// touched over the GEMM time; TFLOP/s the pairs' 6·hidden·inter.
void bench_cuda_moe() {
  using cuda::check_cuda;
  const int64_t E = 128, K = 8, H = 2048, I = 768;
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
  DeviceArena weights;
  auto* gate_up = weights.get<cuda::bf16_bits>(E * 2 * I * H);
  auto* down = weights.get<cuda::bf16_bits>(E * H * I);
  cuda::fill_random_normal_bf16(gate_up, E * 2 * I * H, 1, 0.0f, 0.03f, s);
  cuda::fill_random_normal_bf16(down, E * H * I, 2, 0.0f, 0.03f, s);
  cudaEvent_t ev[4];
  for (cudaEvent_t& e : ev) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  std::printf("| %6s | %6s | %5s | %9s | %9s | %9s | %8s | %7s | %8s |\n", "tokens", "pairs", "BM", "route us",
              "gemms us", "comb. us", "experts", "GB/s", "TFLOP/s");
  std::printf("|--------|--------|-------|-----------|-----------|-----------|----------|---------|----------|\n");
  for (int64_t T : {64, 256, 512, 1024, 2048, 4096, 8192}) {
    const int64_t P = T * K;
    std::vector<int32_t> ids(static_cast<size_t>(P));
    std::vector<float> w(static_cast<size_t>(P), 1.0f / float(K));
    std::set<int32_t> touched;
    std::uniform_int_distribution<int32_t> pick(0, int32_t(E - 1));
    for (int64_t t = 0; t < T; ++t) {
      std::set<int32_t> chosen;
      while (int64_t(chosen.size()) < K) chosen.insert(pick(g_rng));
      int64_t k = 0;
      for (int32_t e : chosen) ids[size_t(t * K + k++)] = e;
      touched.insert(chosen.begin(), chosen.end());
    }
    for (int tile_m : {16, 32, 64, 128}) {
      DeviceArena d;
      const MoeExpertsArgs p{.x = d.put(random_normal(T * H)),
                             .expert_ids = d.put(ids),
                             .weights = d.put(w),
                             .gate_up = gate_up,
                             .down = down,
                             .out = d.get<float>(T * H),
                             .tokens = T,
                             .hidden = H,
                             .inter = I,
                             .n_experts = E,
                             .top_k = K};
      const cuda::MoeGroupedScratch g{
          .route = cuda::moe_grouped_route_at(d.get<int32_t>(cuda::moe_grouped_route_ints(P, E, tile_m)), P, E, tile_m),
          .x_bf16 = d.get<cuda::bf16_bits>(T * H),
          .act = d.get<cuda::bf16_bits>(P * I),
          .y = d.get<float>(P * H),
          .tile_m = tile_m};
      std::vector<double> phase[3];
      for (int run = 0; run < 23; ++run) {
        check_cuda(cudaEventRecord(ev[0], s), "cudaEventRecord");
        cuda::moe_grouped_dispatch(p, g, s);
        check_cuda(cudaEventRecord(ev[1], s), "cudaEventRecord");
        cuda::moe_grouped_gemms(p, g, s);
        check_cuda(cudaEventRecord(ev[2], s), "cudaEventRecord");
        cuda::moe_grouped_combine(p, g, s);
        check_cuda(cudaEventRecord(ev[3], s), "cudaEventRecord");
        check_cuda(cudaEventSynchronize(ev[3]), "cudaEventSynchronize");
        if (run < 3) continue;
        for (int i = 0; i < 3; ++i) {
          float ms = 0.0f;
          check_cuda(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "cudaEventElapsedTime");
          phase[i].push_back(ms * 1e3);
        }
      }
      double med[3];
      for (int i = 0; i < 3; ++i) {
        std::sort(phase[i].begin(), phase[i].end());
        med[i] = phase[i][phase[i].size() / 2];
      }
      const double weight_bytes = double(touched.size()) * 3.0 * double(H * I) * 2.0;
      const double flops = 6.0 * double(P) * double(H * I);
      std::printf("| %6ld | %6ld | %4d%c | %9.1f | %9.1f | %9.1f | %8zu | %7.0f | %8.1f |\n", long(T), long(P), tile_m,
                  tile_m == cuda::moe_grouped_tile_m(P, E) ? '*' : ' ', med[0], med[1], med[2], touched.size(),
                  weight_bytes / med[1] * 1e-3, flops / med[1] * 1e-6);
      std::fflush(stdout);
    }
  }
  bench_cuda_moe_small(gate_up, down, s);
  for (cudaEvent_t e : ev) check_cuda(cudaEventDestroy(e), "cudaEventDestroy");
  check_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}

// Median µs of 20 replays (after 3) of what `issue` enqueues on `s`, captured as one graph: launch
// gaps as in a captured decode step.
double graph_median_us(const std::function<void()>& issue, cudaStream_t s) {
  using cuda::check_cuda;
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  issue();
  check_cuda(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaEvent_t ev[2];
  for (cudaEvent_t& e : ev) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  std::vector<double> us;
  for (int run = 0; run < 23; ++run) {
    check_cuda(cudaEventRecord(ev[0], s), "cudaEventRecord");
    check_cuda(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    check_cuda(cudaEventRecord(ev[1], s), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(ev[1]), "cudaEventSynchronize");
    float ms = 0.0f;
    check_cuda(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
    if (run >= 3) us.push_back(ms * 1e3);
  }
  for (cudaEvent_t e : ev) check_cuda(cudaEventDestroy(e), "cudaEventDestroy");
  check_cuda(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  check_cuda(cudaGraphDestroy(graph), "cudaGraphDestroy");
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Decode-sized expert batches (1 to 16 tokens) on both paths, each captured as a graph: the per-pair
// GEMVs (moe_small_batch, which read an expert once per pair) and the grouped path at 16-row tiles
// (each touched expert once). GB/s: the touched experts' weights over the time.
void bench_cuda_moe_small(const cuda::bf16_bits* gate_up, const cuda::bf16_bits* down, cudaStream_t s) {
  const int64_t E = 128, K = 8, H = 2048, I = 768;
  std::printf("\n| %6s | %6s | %8s | %9s | %7s | %10s | %7s |\n", "tokens", "pairs", "experts", "GEMV us", "GB/s",
              "grouped us", "GB/s");
  std::printf("|--------|--------|----------|-----------|---------|------------|---------|\n");
  for (int64_t T : {1, 2, 4, 8, 10, 12, 16}) {
    const int64_t P = T * K;
    std::vector<int32_t> ids(static_cast<size_t>(P));
    std::set<int32_t> touched;
    std::uniform_int_distribution<int32_t> pick(0, int32_t(E - 1));
    for (int64_t t = 0; t < T; ++t) {
      std::set<int32_t> chosen;
      while (int64_t(chosen.size()) < K) chosen.insert(pick(g_rng));
      int64_t k = 0;
      for (int32_t e : chosen) ids[size_t(t * K + k++)] = e;
      touched.insert(chosen.begin(), chosen.end());
    }
    DeviceArena d;
    const float* x = d.put(random_normal(T * H));
    const int32_t* dids = d.put(ids);
    const float* w = d.put(std::vector<float>(size_t(P), 1.0f / float(K)));
    float* out = d.get<float>(T * H);
    const MoeExpertsArgs a{.x = x,
                           .expert_ids = dids,
                           .weights = w,
                           .gate_up = gate_up,
                           .down = down,
                           .out = out,
                           .tokens = T,
                           .hidden = H,
                           .inter = I,
                           .n_experts = E,
                           .top_k = K};
    float* act = d.get<float>(P * I);
    const int tile_m = 16;
    const cuda::MoeGroupedScratch g{
        .route = cuda::moe_grouped_route_at(d.get<int32_t>(cuda::moe_grouped_route_ints(P, E, tile_m)), P, E, tile_m),
        .x_bf16 = d.get<cuda::bf16_bits>(T * H),
        .act = d.get<cuda::bf16_bits>(P * I),
        .y = d.get<float>(P * H),
        .tile_m = tile_m};
    const double gemv = graph_median_us([&] { cuda::moe_small_batch(a, act, s); }, s);
    const double grouped = graph_median_us(
        [&] {
          cuda::moe_grouped_dispatch(a, g, s);
          cuda::moe_grouped_gemms(a, g, s);
          cuda::moe_grouped_combine(a, g, s);
        },
        s);
    const double bytes = double(touched.size()) * 3.0 * double(H * I) * 2.0;
    std::printf("| %6ld | %6ld | %8zu | %9.1f | %7.0f | %10.1f | %7.0f |\n", long(T), long(P), touched.size(), gemv,
                bytes / gemv * 1e-3, grouped, bytes / grouped * 1e-3);
    std::fflush(stdout);
  }
}

// GQA attention on the Qwen3-30B-A3B shapes (32 query heads, 4 kv heads of 128), bf16 caches of
// random values in shuffled 16-token blocks. Decode: one token per sequence at context 576 (the mean
// context of the bench's 512 + 128 run) and 8,256 (of 8,192 + 128), split as the backend splits; GB/s counts K and V
// once. Prefill: sequences of 512 tokens from position 0 (causal); TFLOP/s counts the visible pairs only. Each case
// captured as a graph (kernel and merge), median of 20 replays; decode also at other split counts than the backend's (*
// marks it).
void bench_cuda_attention() {
  using cuda::check_cuda;
  const int64_t n_heads = 32, kv_heads = 4, hd = 128, bs = 16;
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreate(&s), "cudaStreamCreate");
  std::printf("| %-8s | %6s | %8s | %7s | %6s | %9s | %7s | %8s |\n", "kind", "seqs", "tokens", "context", "splits",
              "us", "GB/s", "TFLOP/s");
  std::printf("|----------|--------|----------|---------|--------|-----------|---------|----------|\n");
  struct Run {
    bool decode;
    int64_t seqs, context;
  };
  for (const Run& run :
       {Run{true, 1, 576}, Run{true, 10, 576}, Run{true, 64, 576}, Run{true, 256, 576}, Run{true, 1, 8256},
        Run{true, 32, 8256}, Run{false, 1, 512}, Run{false, 8, 512}, Run{false, 16, 512}}) {
    const int64_t per_seq = (run.context + bs - 1) / bs, n_blocks = run.seqs * per_seq;
    int64_t width = 1;
    while (width < per_seq) width *= 2;  // as the model pads block tables
    std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), g_rng);
    std::vector<int32_t> tables(static_cast<size_t>(run.seqs * width), 0), token_seq, positions;
    for (int64_t q = 0; q < run.seqs; ++q) {
      std::copy_n(pool.begin() + q * per_seq, per_seq, tables.begin() + q * width);
      for (int64_t p = run.decode ? run.context - 1 : 0; p < run.context; ++p) {
        token_seq.push_back(int32_t(q));
        positions.push_back(int32_t(p));
      }
    }
    const auto T = int64_t(token_seq.size());
    DeviceArena d;
    const int64_t cache = n_blocks * bs * kv_heads * hd;
    auto* kc = d.get<cuda::bf16_bits>(cache);
    auto* vc = d.get<cuda::bf16_bits>(cache);
    cuda::fill_random_normal_bf16(kc, cache, 3, 0.0f, 1.0f, s);
    cuda::fill_random_normal_bf16(vc, cache, 4, 0.0f, 1.0f, s);
    const PagedAttentionArgs p{.q = d.put(random_normal(T * n_heads * hd)),
                               .k_cache = kc,
                               .v_cache = vc,
                               .block_tables = d.put(tables),
                               .token_seq = d.put(token_seq),
                               .positions = d.put(positions),
                               .out = d.get<float>(T * n_heads * hd),
                               .tokens = T,
                               .n_seqs = run.seqs,
                               .n_heads = n_heads,
                               .kv_heads = kv_heads,
                               .head_dim = hd,
                               .v_head_dim = hd,
                               .block_size = bs,
                               .max_blocks = width,
                               .scale = 0.088f,
                               .sliding_window = 0};
    const int64_t chosen = run.decode ? cuda::gqa_decode_splits(T, kv_heads, width * bs) : 1;
    std::set<int64_t> sweep = {chosen};  // decode: the backend's split count, then others for comparison
    if (run.decode) {
      for (int64_t n : {1, 2, 4, 8, 16, 32, 64}) sweep.insert(std::min(n, (width * bs + 63) / 64));
    }
    const int64_t most = *sweep.rbegin();
    float* m = d.get<float>(T * n_heads * most);
    float* l = d.get<float>(T * n_heads * most);
    float* acc = d.get<float>(T * n_heads * most * hd);
    for (int64_t n : sweep) {
      const cuda::AttentionSplit split{.splits = n, .m = m, .l = l, .acc = acc};
      const double us = graph_median_us(
          [&] { run.decode ? cuda::gqa_decode_attention(p, split, s) : cuda::gqa_prefill_attention(p, s); }, s);
      const double kv_bytes = double(run.seqs * run.context * kv_heads * hd * 2 * 2);
      double pairs = 0;
      for (int32_t pos : positions) pairs += double(pos + 1);
      const double flops = 4.0 * pairs * double(n_heads * hd);
      std::printf("| %-8s | %6ld | %8ld | %7ld | %5ld%c | %9.1f | %7.0f | %8.1f |\n", run.decode ? "decode" : "prefill",
                  long(run.seqs), long(T), long(run.context), long(n), n == chosen ? '*' : ' ', us,
                  kv_bytes / us * 1e-3, flops / us * 1e-6);
      std::fflush(stdout);
    }
  }
  check_cuda(cudaStreamDestroy(s), "cudaStreamDestroy");
}
#endif

}  // namespace
}  // namespace sy

int main(int argc, char** argv) {
  using namespace sy;
#ifdef SY_WITH_CUDA
  if (argc > 1 && std::strcmp(argv[1], "--cuda-moe") == 0) {
    bench_cuda_moe();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--cuda-attention") == 0) {
    bench_cuda_attention();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--cuda-fp8") == 0) {
    bench_cuda_fp8();
    return 0;
  }
#endif
  (void)argc;
  (void)argv;
  std::printf("| %-15s | %-34s | %10s | %9s | %9s | %8s | %8s |\n", "op", "shape", "ref ms", "cpu ms", "speedup",
              "cpu GF/s", "cpu GB/s");
  std::printf(
      "|-----------------|------------------------------------|------------|-----------|-----------|----------|--------"
      "--|\n");
  const std::vector<std::function<Case()>> cases = {
      [] { return linear_case(1, 2048, 2048); },
      [] { return linear_case(64, 2048, 2048); },
      [] { return linear_case(37, 129, 1000); },
      [] { return rms_norm_case(64, 4096); },
      [] { return add_rms_norm_case(64, 4096); },
      [] { return embedding_case(8192, 2048, 64); },
      [] { return silu_mul_case(64, 1408); },
      [] { return rope_case(64, 32, 128); },
      [] { return kv_write_case(64, 8, 128, 4096); },
      [] { return attention_case(16, 1024, 1, 32, 8, 128); },
      [] { return attention_case(1, 512, 512, 16, 4, 128); },
      [] { return softmax_topk_case(256, 128, 8); },
  };
  for (const auto& make : cases) {
    report(make());
  }
  return 0;
}
