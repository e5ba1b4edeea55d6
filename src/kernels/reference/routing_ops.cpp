// Scalar references of the sigmoid group-limited routing and the element-wise sum (kernels/ops.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/ops.h"
#include "kernels/uniform_route.h"

namespace sy::ref {

void grouped_topk(const GroupedTopkArgs& a) {
  SY_CHECK(a.n_group >= 1 && a.n_experts % a.n_group == 0 && a.topk_group >= 1 && a.topk_group <= a.n_group,
           "grouped_topk: need n_group dividing n_experts and 1 <= topk_group <= n_group, got n_experts={} n_group={} "
           "topk_group={}",
           a.n_experts, a.n_group, a.topk_group);
  const int64_t per_group = a.n_experts / a.n_group;
  SY_CHECK(a.top_k >= 1 && a.top_k <= a.topk_group * per_group,
           "grouped_topk: top_k {} must be in [1, topk_group * experts per group = {}]", a.top_k,
           a.topk_group * per_group);
  std::vector<double> score(size_t(a.n_experts)), choice(size_t(a.n_experts));
  for (int64_t t = 0; t < a.tokens; ++t) {
    for (int64_t e = 0; e < a.n_experts; ++e) {
      score[size_t(e)] = 1.0 / (1.0 + std::exp(-double(a.logits[t * a.n_experts + e])));
      choice[size_t(e)] = score[size_t(e)] + (a.score_bias ? double(a.score_bias[e]) : 0.0);
    }
    // Group score: the sum of the group's two best biased scores (the one score of a group of one).
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t g = 0; g < a.n_group; ++g) {
      std::vector<double> v(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
      std::sort(v.rbegin(), v.rend());
      groups.emplace_back(v[0] + (per_group > 1 ? v[1] : 0.0), g);
    }
    std::stable_sort(groups.begin(), groups.end(), [](const auto& l, const auto& r) { return l.first > r.first; });
    std::vector<bool> kept(size_t(a.n_group), false);
    for (int64_t i = 0; i < a.topk_group; ++i) kept[size_t(groups[size_t(i)].second)] = true;
    std::vector<std::pair<double, int64_t>> experts;
    for (int64_t e = 0; e < a.n_experts; ++e) {
      if (kept[size_t(e / per_group)]) experts.emplace_back(choice[size_t(e)], e);
    }
    std::stable_sort(experts.begin(), experts.end(), [](const auto& l, const auto& r) { return l.first > r.first; });
    double sum = 0.0;
    for (int64_t k = 0; k < a.top_k; ++k) sum += score[size_t(experts[size_t(k)].second)];
    for (int64_t k = 0; k < a.top_k; ++k) {
      const int64_t e = experts[size_t(k)].second;
      const double w = a.renormalize ? score[size_t(e)] / (sum + 1e-20) : score[size_t(e)];
      a.expert_ids[t * a.top_k + k] = int32_t(e);
      a.weights[t * a.top_k + k] = float(w * double(a.scaling));
    }
  }
  if (a.uniform) uniform_route_rows(a.logits, a.expert_ids, a.tokens, a.n_experts, a.top_k);
}

void uniform_route(const UniformRouteArgs& a) {
  SY_CHECK(a.top_k >= 1 && a.top_k <= a.n_experts,
           "uniform_route: need 1 <= top_k <= n_experts, got top_k={} n_experts={}", a.top_k, a.n_experts);
  uniform_route_rows(a.logits, a.expert_ids, a.tokens, a.n_experts, a.top_k);
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(double(y[i]) + double(x[i]));
}

}  // namespace sy::ref
