// Fast fp32 CPU kernels for sigmoid group-limited routing (DeepSeek-V3 noaux_tc) and the element-wise sum
// that adds the shared experts to the routed ones.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "kernels/ops.h"
#include "kernels/uniform_route.h"

namespace sy::cpu {

namespace {
constexpr int64_t kParallelMinFloats = int64_t{1} << 15;
}

void grouped_topk(const GroupedTopkArgs& a) {
  SY_CHECK(a.n_group >= 1 && a.n_experts % a.n_group == 0 && a.topk_group >= 1 && a.topk_group <= a.n_group,
           "grouped_topk: need n_group dividing n_experts and 1 <= topk_group <= n_group, got n_experts={} n_group={} "
           "topk_group={}",
           a.n_experts, a.n_group, a.topk_group);
  const int64_t per_group = a.n_experts / a.n_group;
  SY_CHECK(a.top_k >= 1 && a.top_k <= a.topk_group * per_group,
           "grouped_topk: top_k {} must be in [1, topk_group * experts per group = {}]", a.top_k,
           a.topk_group * per_group);
#pragma omp parallel if (a.tokens * a.n_experts >= kParallelMinFloats / 8)
  {
    std::vector<float> score(size_t(a.n_experts)), choice(size_t(a.n_experts)), group_score(size_t(a.n_group));
    std::vector<int32_t> groups(size_t(a.n_group)), order;
    std::vector<bool> kept(size_t(a.n_group));
#pragma omp for
    for (int64_t t = 0; t < a.tokens; ++t) {
      for (int64_t e = 0; e < a.n_experts; ++e) {
        score[size_t(e)] = 1.0f / (1.0f + std::exp(-a.logits[t * a.n_experts + e]));
        choice[size_t(e)] = score[size_t(e)] + (a.score_bias ? a.score_bias[e] : 0.0f);
      }
      for (int64_t g = 0; g < a.n_group; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          const float c = choice[size_t(e)];
          if (c > best) {
            second = best;
            best = c;
          } else if (c > second) {
            second = c;
          }
        }
        group_score[size_t(g)] = per_group > 1 ? best + second : best;
      }
      // Descending with ties to the lower id: a stable descending order's first entries.
      const auto better = [](const std::vector<float>& v) {
        return [&v](int32_t l, int32_t r) {
          return v[size_t(l)] > v[size_t(r)] || (v[size_t(l)] == v[size_t(r)] && l < r);
        };
      };
      std::iota(groups.begin(), groups.end(), 0);
      std::partial_sort(groups.begin(), groups.begin() + a.topk_group, groups.end(), better(group_score));
      std::fill(kept.begin(), kept.end(), false);
      for (int64_t i = 0; i < a.topk_group; ++i) kept[size_t(groups[size_t(i)])] = true;
      order.clear();
      for (int32_t e = 0; e < int32_t(a.n_experts); ++e) {
        if (kept[size_t(e / per_group)]) order.push_back(e);
      }
      std::partial_sort(order.begin(), order.begin() + a.top_k, order.end(), better(choice));
      float sum = 0.0f;
      for (int64_t k = 0; k < a.top_k; ++k) sum += score[size_t(order[size_t(k)])];
      const float denominator = a.renormalize ? sum + 1e-20f : 1.0f;
      for (int64_t k = 0; k < a.top_k; ++k) {
        const int32_t e = order[size_t(k)];
        a.expert_ids[t * a.top_k + k] = e;
        a.weights[t * a.top_k + k] = score[size_t(e)] / denominator * a.scaling;
      }
      if (a.uniform) uniform_route_row(a.logits + t * a.n_experts, a.n_experts, a.top_k, a.expert_ids + t * a.top_k);
    }
  }
}

void add(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd if (n >= 16 * kParallelMinFloats)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace sy::cpu
