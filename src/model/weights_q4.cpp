// WeightLoader: 4-bit matrices kept as stored where the backend takes them (QuantView int4_group and nvfp4):
// the packed bytes, group scales and (NVFP4) per-tensor scales of compressed-tensors INT4 and ModelOpt NVFP4
// checkpoints, cut to a rank's slice, or random values of that form.
#include <cstring>
#include <numeric>

#include "base/check.h"
#include "base/input.h"
#include "base/int_math.h"
#include "model/weights.h"

namespace sy {

namespace {

// Random weights: every nibble value equally likely, scaled so that the weights' RMS is kRandomWeightStddev, as
// the dense generator's. RMS of (n - 8) over n in 0..15 is sqrt(21.5); of E2M1 over all 16 codes,
// sqrt(8.5625).
constexpr float kInt4Rms = 4.6368092f;
constexpr float kE2m1Rms = 2.9261750f;

size_t group_scale_bytes(WeightFormat f) { return f == WeightFormat::int4_group ? 2 : 1; }

}  // namespace

WeightFormat WeightLoader::keeps_q4(const std::string& name, const Shape& shape, int64_t rows, int64_t cols,
                                    const Slice& slice) const {
  const WeightFormat f = quant_.int4_group ? WeightFormat::int4_group
                         : quant_.nvfp4    ? WeightFormat::nvfp4
                                           : WeightFormat::dense;
  if (f == WeightFormat::dense || shape.rank() != 2 || !name.ends_with(".weight")) return WeightFormat::dense;
  const int64_t g = quant_.group_size;
  bool stored = false;
  if (checkpoint_ == nullptr) {
    stored = quant_.quantises(name);
  } else if (f == WeightFormat::int4_group) {
    // Group scales other than BF16 are dequantised at load (the kernels read bf16 scales).
    const TensorInfo* packed = checkpoint_->find(int4_packed_name(name));
    const TensorInfo* scale = checkpoint_->find(linear_module(name) + ".weight_scale");
    stored = packed != nullptr && scale != nullptr && scale->dtype == DType::bf16;
  } else {
    const TensorInfo* t = checkpoint_->find(name);
    stored = t != nullptr && t->dtype == DType::u8;
  }
  // The rank's columns hold whole groups from a whole byte on; rows cut anywhere.
  const bool whole_groups = shape[1] % g == 0 && (slice.whole() || slice.dim == 0 ||
                                                  (slice.start % std::lcm(g, int64_t{2}) == 0 && slice.count % g == 0));
  return stored && whole_groups && backend_.keeps_quantised(f, rows, cols, 1, g) ? f : WeightFormat::dense;
}

MatrixArray WeightLoader::allocate_q4(WeightFormat f, int64_t count, int64_t rows, int64_t cols) {
  MatrixArray a{.rows = rows, .cols = cols, .count = count};
  const int64_t g = quant_.group_size, scale_cols = cols / g;
  void* group_scales = allocate_bytes(static_cast<size_t>(count * rows * scale_cols) * group_scale_bytes(f));
  void* row_scales =
      f == WeightFormat::nvfp4 ? allocate_bytes(static_cast<size_t>(count * rows) * sizeof(float)) : nullptr;
  a.first.w = allocate_bytes(static_cast<size_t>(count * rows * cols / 2));
  a.first.q = {.format = f,
               .group_scales = group_scales,
               .row_scales = static_cast<const float*>(row_scales),
               .block_rows = 1,
               .block_cols = g,
               .scale_cols = scale_cols,
               .scale_stride = rows * scale_cols};
  return a;
}

Matrix WeightLoader::q4_matrix_at(const MatrixArray& a, int64_t index, int64_t row0) const {
  Matrix m = a.first;
  if (store_.checks_only) return m;
  const int64_t row = index * a.rows + row0;
  m.w = static_cast<const uint8_t*>(a.first.w) + row * a.cols / 2;
  m.q.group_scales = static_cast<const uint8_t*>(a.first.q.group_scales) +
                     static_cast<size_t>(row * m.q.scale_cols) * group_scale_bytes(m.q.format);
  if (m.q.row_scales != nullptr) m.q.row_scales += row;
  return m;
}

void WeightLoader::load_q4_matrix(const std::string& name, const Shape& shape, const MatrixArray& dst, int64_t index,
                                  int64_t row0, const Slice& slice) {
  const WeightFormat f = dst.first.q.format;
  const char* form = f == WeightFormat::int4_group ? "INT4" : "NVFP4";
  SY_CHECK(shape.rank() == 2, "{} weight '{}' of shape {} is not a matrix (a model definition error)", form, name,
           shape.str());
  const int64_t R = shape[0], C = shape[1], g = quant_.group_size;
  const int64_t r0 = !slice.whole() && slice.dim == 0 ? slice.start : 0;
  const int64_t rows = !slice.whole() && slice.dim == 0 ? slice.count : R;
  const int64_t c0 = !slice.whole() && slice.dim == 1 ? slice.start : 0;
  const int64_t cols = !slice.whole() && slice.dim == 1 ? slice.count : C;
  SY_CHECK(cols == dst.cols && row0 + rows <= dst.rows && c0 % std::lcm(g, int64_t{2}) == 0 && cols % g == 0,
           "{} weight '{}' {} cut to [{}, {}] from column {} does not fit matrix rows {}.. of [{}, {}] in groups of {} "
           "(a model definition error)",
           form, name, shape.str(), rows, cols, c0, row0, dst.rows, dst.cols, g);
  const Matrix m = q4_matrix_at(dst, index, row0);
  auto* bytes = static_cast<uint8_t*>(const_cast<void*>(m.w));
  auto* group_scales = const_cast<void*>(m.q.group_scales);
  auto* row_scales = const_cast<float*>(m.q.row_scales);
  const int64_t n_groups = rows * cols / g;
  if (checkpoint_ == nullptr) {
    SY_CHECK(used_.insert(name).second, "weight '{}' is bound twice (a model definition error)", name);
    if (store_.checks_only) return;
    const bool int4 = f == WeightFormat::int4_group;
    backend_.fill_random_q4({.format = f,
                             .dst = bytes,
                             .n_bytes = rows * cols / 2,
                             .group_scales = group_scales,
                             .n_groups = n_groups,
                             .row_scales = row_scales,
                             .n_rows = int4 ? 0 : rows,
                             .seed = weight_seed(seed_, name, slice, "#q4"),
                             .group_scale = int4 ? kRandomWeightStddev / kInt4Rms : 1.0f,
                             .row_scale = kRandomWeightStddev / kE2m1Rms});
    return;
  }
  const TensorInfo* packed = check_tensor(name, shape);  // the INT4 check names weight_packed
  const bool is_int4 = packed->name != name, is_nvfp4 = packed->dtype == DType::u8 && packed->name == name;
  SY_CHECK(f == WeightFormat::int4_group ? is_int4 : is_nvfp4,
           "{}: tensor '{}' is {} {}, but the weights stacked with it are {}; every part of a fused matrix must be "
           "stored alike",
           packed->file, cut_for_message(name), dtype_name(packed->dtype), packed->shape.str(), form);
  SY_CHECK(used_.insert(name).second, "weight '{}' is bound twice (a model definition error)", name);
  const std::string module = linear_module(name);
  const TensorInfo& scale = *checkpoint_->find(module + ".weight_scale");
  SY_CHECK(f == WeightFormat::nvfp4 || scale.dtype == DType::bf16,
           "{}: group scales '{}' are {}, but the INT4 weights stacked with them keep BF16 scales; every part of a "
           "fused matrix must be stored alike",
           scale.file, cut_for_message(scale.name), dtype_name(scale.dtype));
  used_.insert(packed->name);
  used_.insert(scale.name);
  float global = 1.0f;
  size_t extra = 0;
  if (f == WeightFormat::int4_group) {
    used_.insert(module + ".weight_shape");  // checked by check_int4, not kept: 16 bytes of metadata
  } else {
    const TensorInfo& scale2 = *checkpoint_->find(module + ".weight_scale_2");
    used_.insert(scale2.name);
    std::memcpy(&global, scale2.data, sizeof global);
    extra = 4;
    // The activation scale is checked and not used: the arithmetic is weight-only (no FP4 tensor cores on
    // Hopper), as vLLM's and SGLang's fallbacks do.
    if (const TensorInfo* input = checkpoint_->find(module + ".input_scale")) {
      used_.insert(input->name);
      extra += 4;
    }
  }
  const size_t esize = group_scale_bytes(f);
  store_.checkpoint_bytes += static_cast<size_t>(rows * cols / 2) + static_cast<size_t>(n_groups) * esize + extra;
  if (store_.checks_only) return;
  show_progress(static_cast<size_t>(rows * cols / 2));
  // Bytes of each stored row: INT4 words are little-endian, so element k sits in byte k / 2 as in NVFP4.
  const int64_t row_bytes = f == WeightFormat::int4_group ? ceil_div_sat(C, 8) * 4 : C / 2;
  const auto* src = reinterpret_cast<const uint8_t*>(packed->data);
  byte_staging_.resize(static_cast<size_t>(rows * cols / 2));
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(byte_staging_.data() + i * cols / 2, src + (r0 + i) * row_bytes + c0 / 2,
                static_cast<size_t>(cols / 2));
  }
  backend_.copy_to_device(bytes, byte_staging_.data(), byte_staging_.size());
  const int64_t stored_groups = ceil_div_sat(C, g), part_groups = cols / g;
  const auto* s = reinterpret_cast<const uint8_t*>(scale.data);
  byte_staging_.resize(static_cast<size_t>(n_groups) * esize);
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(byte_staging_.data() + static_cast<size_t>(i * part_groups) * esize,
                s + static_cast<size_t>((r0 + i) * stored_groups + c0 / g) * esize,
                static_cast<size_t>(part_groups) * esize);
  }
  backend_.copy_to_device(group_scales, byte_staging_.data(), byte_staging_.size());
  if (row_scales != nullptr) {
    const std::vector<float> per_row(static_cast<size_t>(rows), global);
    backend_.copy_to_device(row_scales, per_row.data(), per_row.size() * sizeof(float));
  }
}

}  // namespace sy
