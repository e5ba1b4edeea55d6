// Sampling on the device (CudaBackend::sample_tokens) against its oracle cpu::sample_row: the same token for
// every row, draw and parameter set (greedy, temperature, min-p, top-k up to and past the kernel's 1024,
// top-p inside and past the 1024 best, their combinations), over vocabularies from 1 to Qwen3's, with ties,
// signed zeros, peaked and flat rows, and rows holding NaN or infinities.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace sy {
namespace {

enum class Shape { normal, peaked, flat, ties };

std::vector<float> make_row(int64_t vocab, Shape shape, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (auto& x : row) {
    switch (shape) {
      case Shape::normal:
        x = 2.0f * normal(rng);
        break;
      case Shape::peaked:
        x = 8.0f * normal(rng);
        break;
      case Shape::flat:
        x = 0.01f * normal(rng);
        break;
      case Shape::ties:  // few distinct values, zeros of both signs among them
        x = static_cast<float>(small(rng));
        if (x == 0.0f && (rng() & 1u) != 0) x = -0.0f;
        break;
    }
  }
  return row;
}

std::vector<SampleRow> parameter_sets() {
  return {
      {.temperature = 0.0f},
      {.temperature = 0.7f},
      {.temperature = 1.0f, .min_p = 0.1f},
      {.temperature = 1.3f, .top_k = 1},
      {.temperature = 1.0f, .top_k = 40},
      {.temperature = 0.8f, .top_k = 1024},
      {.temperature = 1.0f, .top_k = 1500},  // past the kernel's candidates: sampled on the host
      {.temperature = 1.0f, .top_p = 0.9f},
      {.temperature = 0.6f, .top_p = 0.5f},
      {.temperature = 1.0f, .top_p = 0.999f},
      {.temperature = 1.0f, .top_k = 50, .top_p = 0.8f, .min_p = 0.05f},
      {.temperature = 2.0f, .top_k = 1 << 20},  // more than the vocabulary
  };
}

TEST(CudaSampling, DrawsTheTokensOfTheHostSampler) {
  auto gpu = make_cuda_backend(0);
  std::mt19937 rng(7);
  std::mt19937_64 draws(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int64_t compared = 0;
  for (int64_t vocab : {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{4099}, int64_t{151936}}) {
    for (Shape shape : {Shape::normal, Shape::peaked, Shape::flat, Shape::ties}) {
      // Rows of one matrix, each sampled under every parameter set with draws of its own, in an order that is
      // not the rows' own.
      constexpr int kRows = 3;
      std::vector<float> logits;
      for (int r = 0; r < kRows; ++r) {
        const std::vector<float> row = make_row(vocab, shape, rng);
        logits.insert(logits.end(), row.begin(), row.end());
      }
      std::vector<SampleRow> rows;
      for (const SampleRow& p : parameter_sets()) {
        for (int r = kRows - 1; r >= 0; --r) {
          SampleRow s = p;
          s.row = r;
          s.u = uniform(draws);
          rows.push_back(s);
        }
      }
      auto dev = gpu->alloc(logits.size() * sizeof(float));
      gpu->copy_to_device(dev->data(), logits.data(), logits.size() * sizeof(float));
      std::vector<int32_t> tokens(rows.size(), -7);
      gpu->sample_tokens(dev->as<float>(), vocab, rows.data(), static_cast<int64_t>(rows.size()), tokens.data());
      for (size_t i = 0; i < rows.size(); ++i) {
        const SampleRow& s = rows[i];
        const int32_t expected = cpu::sample_row(logits.data() + s.row * vocab, vocab, s);
        ASSERT_GE(expected, 0);
        EXPECT_EQ(tokens[i], expected) << "vocab " << vocab << " shape " << static_cast<int>(shape) << " row " << s.row
                                       << " temperature " << s.temperature << " top_k " << s.top_k << " top_p "
                                       << s.top_p << " min_p " << s.min_p << " u " << s.u;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 5 * 4 * 3 * static_cast<int64_t>(parameter_sets().size()));
}

TEST(CudaSampling, RowsWithNanOrInfinityAreNotSampled) {
  auto gpu = make_cuda_backend(0);
  std::mt19937 rng(3);
  const int64_t vocab = 3000;
  std::vector<float> logits;
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> row = make_row(vocab, Shape::normal, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  logits[static_cast<size_t>(0 * vocab + 2999)] = std::numeric_limits<float>::quiet_NaN();
  logits[static_cast<size_t>(1 * vocab + 17)] = -std::numeric_limits<float>::infinity();
  auto dev = gpu->alloc(logits.size() * sizeof(float));
  gpu->copy_to_device(dev->data(), logits.data(), logits.size() * sizeof(float));
  std::vector<SampleRow> rows;
  for (const SampleRow& p : parameter_sets()) {
    for (int r = 0; r < 3; ++r) {
      SampleRow s = p;
      s.row = r;
      s.u = 0.5;
      rows.push_back(s);
    }
  }
  std::vector<int32_t> tokens(rows.size());
  gpu->sample_tokens(dev->as<float>(), vocab, rows.data(), static_cast<int64_t>(rows.size()), tokens.data());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].row < 2) {
      EXPECT_EQ(tokens[i], kSampleNotFinite) << "row " << rows[i].row << " temperature " << rows[i].temperature;
    } else {
      EXPECT_EQ(tokens[i], cpu::sample_row(logits.data() + 2 * vocab, vocab, rows[i]));
    }
  }
}

}  // namespace
}  // namespace sy
