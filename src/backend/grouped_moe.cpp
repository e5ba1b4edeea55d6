// GroupedMoe: the portable routed-experts path, built from each backend's primitive ops.
#include "backend/grouped_moe.h"

#include <algorithm>

namespace sy {

namespace {
// The slots of GroupedMoe's own scratch.
enum Slot : int { kRows, kRowWeights, kExpertIn, kGateUp, kAct, kExpertOut };

// Matrix e [rows, cols] of an expert array whose first matrix is `first`, stored as `q` (QuantView: the matrices'
// elements one after another; matrix e's block or group scales from e · scale_stride, NVFP4's row scales from
// e · rows).
Matrix expert_matrix(const Backend& be, const void* first, const QuantView& q, int64_t e, int64_t rows, int64_t cols) {
  const int64_t elems = e * rows * cols;
  Matrix m{.w = first, .q = q};
  switch (q.format) {
    case WeightFormat::dense:
      m.w = weight_at(be, first, elems);
      break;
    case WeightFormat::fp8_block:
      m.w = static_cast<const uint8_t*>(first) + elems;
      m.q.scales += e * q.scale_stride;
      break;
    case WeightFormat::int4_group:
    case WeightFormat::nvfp4: {
      const int64_t scale_bytes = q.format == WeightFormat::int4_group ? 2 : 1;  // bf16 or e4m3
      m.w = static_cast<const uint8_t*>(first) + elems / 2;
      m.q.group_scales = static_cast<const uint8_t*>(q.group_scales) + e * q.scale_stride * scale_bytes;
      if (q.row_scales != nullptr) m.q.row_scales += e * rows;
      break;
    }
  }
  return m;
}
}  // namespace

void GroupedMoe::run(const MoeExpertsArgs& c, const ExpertLinear& linear) {
  Backend& be = backend_;
  const int64_t T = c.tokens, K = c.top_k, TK = T * K;
  const auto pairs = static_cast<size_t>(TK), E = static_cast<size_t>(c.n_experts);
  be.mark(Phase::router);
  // Group the (token, k) pairs by expert on the host, tokens in order within each expert.
  ids_.resize(pairs);
  weights_.resize(pairs);
  be.copy_to_host(ids_.data(), c.expert_ids, pairs * sizeof(int32_t));
  be.copy_to_host(weights_.data(), c.weights, pairs * sizeof(float));
  offsets_.assign(E + 1, 0);
  for (int32_t e : ids_) ++offsets_[static_cast<size_t>(e) + 1];
  for (size_t e = 0; e < E; ++e) offsets_[e + 1] += offsets_[e];
  rows_.resize(pairs);
  row_weights_.resize(pairs);
  fill_.assign(offsets_.begin(), offsets_.end() - 1);
  for (size_t i = 0; i < pairs; ++i) {
    const auto at = static_cast<size_t>(fill_[static_cast<size_t>(ids_[i])]++);
    rows_[at] = static_cast<int32_t>(static_cast<int64_t>(i) / K);
    row_weights_[at] = weights_[i];
  }
  int32_t* d_rows = scratch_.get<int32_t>(kRows, TK);
  float* d_row_w = scratch_.get<float>(kRowWeights, TK);
  be.copy_to_device(d_rows, rows_.data(), pairs * sizeof(int32_t));
  be.copy_to_device(d_row_w, row_weights_.data(), pairs * sizeof(float));

  int64_t max_rows = 0;
  for (size_t e = 0; e < E; ++e) max_rows = std::max(max_rows, offsets_[e + 1] - offsets_[e]);
  float* xe = scratch_.get<float>(kExpertIn, max_rows * c.hidden);
  float* gate_up = scratch_.get<float>(kGateUp, max_rows * 2 * c.inter);
  float* act = scratch_.get<float>(kAct, max_rows * c.inter);
  float* ye = scratch_.get<float>(kExpertOut, max_rows * c.hidden);
  const auto product = [&](const float* x, const Matrix& w, float* y, int64_t m, int64_t n, int64_t k) {
    if (linear) return linear(x, w, y, m, n, k);
    be.linear(x, w, nullptr, y, m, n, k);
  };
  be.zero(c.out, static_cast<size_t>(T * c.hidden) * sizeof(float));
  for (size_t e = 0; e < E; ++e) {
    const int64_t begin = offsets_[e], n = offsets_[e + 1] - begin;
    if (n == 0) continue;
    const auto ei = static_cast<int64_t>(e);
    be.mark(Phase::experts);
    be.gather_rows(c.x, d_rows + begin, xe, n, c.hidden);
    product(xe, expert_matrix(be, c.gate_up, c.gate_up_q, ei, 2 * c.inter, c.hidden), gate_up, n, 2 * c.inter,
            c.hidden);
    be.silu_mul(gate_up, act, n, c.inter);
    product(act, expert_matrix(be, c.down, c.down_q, ei, c.hidden, c.inter), ye, n, c.hidden, c.inter);
    be.mark(Phase::combine);
    be.scatter_add_rows(c.out, d_rows + begin, d_row_w + begin, ye, n, c.hidden);
  }
}

}  // namespace sy
