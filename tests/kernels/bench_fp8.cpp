// bench_kernels --cuda-fp8: block-FP8 products on one GPU through the CUDA backend, each path captured as a
// graph of 20 calls and replayed (median of 7 replays after a warm-up): the dense projection and the routed
// experts with 128 × 128 blocks (the FP8 tensor cores, x quantised per row and 128 columns) against the same
// bytes with 64 × 64 blocks (which the backend widens to bf16 for cuBLAS and for the bf16 grouped GEMMs), on
// Qwen3-30B-A3B's shapes. A benchmark, not a test: it asserts nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/int_math.h"

namespace sy {
namespace {

struct Fp8Weights {
  std::unique_ptr<DeviceBuffer> bytes, scales;
  Matrix m;
};

// `count` random [rows, cols] E4M3 matrices with blocks of `block` × `block`.
Fp8Weights random_fp8(Backend& be, int64_t count, int64_t rows, int64_t cols, int64_t block, uint64_t seed) {
  Fp8Weights w;
  const int64_t scale_cols = ceil_div_sat(cols, block), stride = ceil_div_sat(rows, block) * scale_cols;
  w.bytes = be.alloc(size_t(count * rows * cols));
  w.scales = be.alloc(size_t(count * stride) * 4);
  be.fill_random_fp8({.dst = w.bytes->data(),
                      .n = count * rows * cols,
                      .scales = w.scales->as<float>(),
                      .n_scales = count * stride,
                      .seed = seed,
                      .stddev = 0.03f,
                      .scale = 0.03f / 64.0f});
  w.m = {.w = w.bytes->data(),
         .q = {.format = WeightFormat::fp8_block,
               .scales = w.scales->as<float>(),
               .block_rows = block,
               .block_cols = block,
               .scale_cols = scale_cols,
               .scale_stride = stride}};
  return w;
}

// Median µs of one call of `issue`, from 7 replays of a graph of 20 calls.
double median_us(Backend& be, const std::function<void()>& issue) {
  issue();  // warm-up, and scratch allocated outside the capture
  be.synchronize();
  const int64_t graph = be.capture([&] {
    for (int i = 0; i < 20; ++i) issue();
  });
  std::vector<double> us;
  for (int run = 0; run < 8; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    be.replay(graph);
    be.synchronize();
    const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 20;
    if (run > 0) us.push_back(t);
  }
  be.drop_captures();
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

std::unique_ptr<DeviceBuffer> device_copy(Backend& be, const void* host, size_t bytes) {
  auto b = be.alloc(bytes + 16);
  be.copy_to_device(b->data(), host, bytes);
  return b;
}

}  // namespace

void bench_cuda_fp8() {
  auto be = make_cuda_backend(0);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::printf(
      "Dense block-FP8 projections: µs per call (64x64 blocks: widened to bf16 + cuBLAS; 128x128: FP8 "
      "tensor cores)\n\n| %5s | %5s | %5s | %10s | %10s | %8s | %9s |\n",
      "m", "n", "k", "widen us", "fp8 tc us", "GB/s tc", "TFLOP/s tc");
  std::printf("|-------|-------|-------|------------|------------|----------|-----------|\n");
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{5120, 2048}, {2048, 4096}}) {
    const Fp8Weights w64 = random_fp8(*be, 1, n, k, 64, 1), w128 = random_fp8(*be, 1, n, k, 128, 1);
    for (int64_t m : {5, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}) {
      std::vector<float> x(size_t(m * k));
      for (float& v : x) v = normal(rng);
      auto xd = device_copy(*be, x.data(), x.size() * 4);
      auto y = be->alloc(size_t(m * n) * 4);
      const double widen =
          median_us(*be, [&] { be->linear(xd->as<float>(), w64.m, nullptr, y->as<float>(), m, n, k); });
      const double tc = median_us(*be, [&] { be->linear(xd->as<float>(), w128.m, nullptr, y->as<float>(), m, n, k); });
      std::printf("| %5ld | %5ld | %5ld | %10.1f | %10.1f | %8.0f | %9.1f |\n", long(m), long(n), long(k), widen, tc,
                  double(n * k) / tc * 1e-3, 2.0 * double(m * n * k) / tc * 1e-6);
      std::fflush(stdout);
    }
  }

  const int64_t E = 128, K = 8, H = 2048, I = 768;
  const Fp8Weights gu64 = random_fp8(*be, E, 2 * I, H, 64, 2), dn64 = random_fp8(*be, E, H, I, 64, 3);
  const Fp8Weights gu128 = random_fp8(*be, E, 2 * I, H, 128, 2), dn128 = random_fp8(*be, E, H, I, 128, 3);
  std::printf(
      "\nRouted block-FP8 experts (128 experts, top 8, hidden 2048, inter 768, uniform random routing): µs "
      "per call\n\n| %6s | %6s | %8s | %10s | %10s | %8s | %9s |\n",
      "tokens", "pairs", "experts", "widen us", "fp8 tc us", "GB/s tc", "TFLOP/s tc");
  std::printf("|--------|--------|----------|------------|------------|----------|-----------|\n");
  for (int64_t T : {4, 8, 64, 256, 512, 1024, 4096}) {
    const int64_t P = T * K;
    std::vector<int32_t> ids(static_cast<size_t>(P));
    std::vector<float> wts(static_cast<size_t>(P), 1.0f / float(K)), x(static_cast<size_t>(T * H));
    for (float& v : x) v = normal(rng);
    std::set<int32_t> touched;
    std::uniform_int_distribution<int32_t> pick(0, int32_t(E - 1));
    for (int64_t t = 0; t < T; ++t) {
      std::set<int32_t> chosen;
      while (int64_t(chosen.size()) < K) chosen.insert(pick(rng));
      int64_t k = 0;
      for (int32_t e : chosen) ids[size_t(t * K + k++)] = e;
      touched.insert(chosen.begin(), chosen.end());
    }
    auto xd = device_copy(*be, x.data(), x.size() * 4);
    auto idd = device_copy(*be, ids.data(), ids.size() * 4);
    auto wd = device_copy(*be, wts.data(), wts.size() * 4);
    auto out = be->alloc(size_t(T * H) * 4);
    const auto call = [&](const Fp8Weights& gu, const Fp8Weights& dn) {
      return MoeExpertsArgs{.x = xd->as<float>(),
                            .expert_ids = idd->as<int32_t>(),
                            .weights = wd->as<float>(),
                            .gate_up = gu.m.w,
                            .down = dn.m.w,
                            .gate_up_q = gu.m.q,
                            .down_q = dn.m.q,
                            .out = out->as<float>(),
                            .tokens = T,
                            .hidden = H,
                            .inter = I,
                            .n_experts = E,
                            .top_k = K};
    };
    const MoeExpertsArgs a64 = call(gu64, dn64), a128 = call(gu128, dn128);
    const double widen = median_us(*be, [&] { be->moe_experts(a64); });
    const double tc = median_us(*be, [&] { be->moe_experts(a128); });
    std::printf("| %6ld | %6ld | %8zu | %10.1f | %10.1f | %8.0f | %9.1f |\n", long(T), long(P), touched.size(), widen,
                tc, double(touched.size()) * 3.0 * double(H * I) / tc * 1e-3, 6.0 * double(P * H * I) / tc * 1e-6);
    std::fflush(stdout);
  }
}

}  // namespace sy
