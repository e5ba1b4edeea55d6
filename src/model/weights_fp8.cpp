// WeightLoader: linear weights as matrices in the form the backend computes with, block FP8 (and, in
// weights_q4.cpp, 4-bit forms) kept as stored where the backend takes it (bind_matrix, allocate_matrices,
// load_matrix_into).
#include <algorithm>
#include <numeric>

#include "base/check.h"
#include "base/input.h"
#include "base/int_math.h"
#include "model/weights.h"

namespace sy {

namespace {
// Random FP8 weights are drawn as e4m3 values of N(0, kFp8Spread) with every scale kRandomWeightStddev /
// kFp8Spread: well inside e4m3's range (448) and its normal numbers.
constexpr float kFp8Spread = 16.0f;

bool cuts_no_block(const Slice& slice, int64_t block_rows, int64_t block_cols) {
  if (slice.whole()) return true;
  const int64_t b = slice.dim == 0 ? block_rows : block_cols;
  return slice.start % b == 0 && slice.count % b == 0;
}
}  // namespace

bool WeightLoader::keeps_fp8(const std::string& name, const Shape& shape, int64_t rows, int64_t cols, int64_t part_rows,
                             const Slice& slice) const {
  if (!quant_.block_fp8) return false;
  bool stored_fp8 = false;
  if (checkpoint_ != nullptr) {
    const TensorInfo* t = checkpoint_->find(name);
    stored_fp8 = t != nullptr && t->dtype == DType::f8_e4m3 && t->shape == shape;
  } else {
    stored_fp8 = quant_.quantises(name);
  }
  return stored_fp8 && (part_rows == rows || part_rows % quant_.block_rows == 0) &&
         cuts_no_block(slice, quant_.block_rows, quant_.block_cols) &&
         backend_.keeps_quantised(WeightFormat::fp8_block, rows, cols, quant_.block_rows, quant_.block_cols);
}

WeightFormat WeightLoader::kept_format(const std::string& probe, const Shape& probe_shape, int64_t rows, int64_t cols,
                                       int64_t part_rows, const Slice& slice) const {
  if (keeps_fp8(probe, probe_shape, rows, cols, part_rows, slice)) return WeightFormat::fp8_block;
  return keeps_q4(probe, probe_shape, rows, cols, slice);
}

MatrixArray WeightLoader::allocate_matrices(const std::string& probe, const Shape& probe_shape, int64_t count,
                                            int64_t rows, int64_t cols, int64_t part_rows, const Slice& slice,
                                            bool keep_quantised) {
  SY_CHECK(count >= 0 && rows >= 0 && cols >= 0 && part_rows > 0 && rows % part_rows == 0,
           "matrices of {} x [{}, {}] in parts of {} rows (a model definition error)", count, rows, cols, part_rows);
  MatrixArray a{.rows = rows, .cols = cols, .count = count};
  const WeightFormat form =
      keep_quantised ? kept_format(probe, probe_shape, rows, cols, part_rows, slice) : WeightFormat::dense;
  if (form == WeightFormat::int4_group || form == WeightFormat::nvfp4) return allocate_q4(form, count, rows, cols);
  if (form == WeightFormat::dense) {
    a.first.w = allocate(count * rows * cols);
    return a;
  }
  const int64_t scale_rows = ceil_div_sat(rows, quant_.block_rows);
  const int64_t scale_cols = ceil_div_sat(cols, quant_.block_cols);
  // Scales first: the bytes after them stay 16-byte aligned (the allocation is).
  void* scales = allocate_bytes(static_cast<size_t>(count * scale_rows * scale_cols) * sizeof(float));
  a.first.w = allocate_bytes(static_cast<size_t>(count * rows * cols));
  a.first.q = {.format = WeightFormat::fp8_block,
               .scales = static_cast<const float*>(scales),
               .block_rows = quant_.block_rows,
               .block_cols = quant_.block_cols,
               .scale_cols = scale_cols,
               .scale_stride = scale_rows * scale_cols};
  return a;
}

Matrix WeightLoader::matrix_at(const MatrixArray& a, int64_t index, int64_t row0) const {
  const int64_t elem = (index * a.rows + row0) * a.cols;
  if (a.first.q.dense()) return {.w = at(const_cast<void*>(a.first.w), elem), .q = {}};
  if (a.first.q.four_bit()) return q4_matrix_at(a, index, row0);
  Matrix m = a.first;
  if (store_.checks_only) return m;
  SY_CHECK(row0 % m.q.block_rows == 0, "FP8 matrix part from row {} starts inside a block of {} rows", row0,
           m.q.block_rows);
  m.w = static_cast<const uint8_t*>(a.first.w) + elem;
  m.q.scales += index * m.q.scale_stride + row0 / m.q.block_rows * m.q.scale_cols;
  return m;
}

Matrix WeightLoader::bind_matrix(const std::string& name, const Shape& shape, const Slice& slice) {
  if (checkpoint_ != nullptr) check_tensor(name, shape);  // before allocating what the config asks for
  const int64_t rows = slice.whole() || slice.dim == 1 ? shape[0] : slice.count;
  const int64_t cols = slice.whole() || slice.dim == 0 ? shape.numel() / shape[0] : slice.count;
  const MatrixArray a = allocate_matrices(name, shape, 1, rows, cols, rows, slice);
  load_matrix_into(name, shape, a, 0, 0, slice);
  return a.first;
}

void WeightLoader::load_matrix_into(const std::string& name, const Shape& shape, const MatrixArray& dst, int64_t index,
                                    int64_t row0, const Slice& slice) {
  SY_CHECK(index >= 0 && index < dst.count && row0 >= 0 && row0 < dst.rows,
           "weight '{}' into matrix {} of {} from row {} of {} (a model definition error)", name, index, dst.count,
           row0, dst.rows);
  if (dst.first.q.dense()) {
    load_into(name, shape, const_cast<void*>(matrix_at(dst, index, row0).w), WeightInit::normal, slice);
    return;
  }
  if (dst.first.q.four_bit()) return load_q4_matrix(name, shape, dst, index, row0, slice);
  load_fp8_matrix(name, shape, dst, index, row0, slice);
}

void WeightLoader::load_fp8_matrix(const std::string& name, const Shape& shape, const MatrixArray& dst, int64_t index,
                                   int64_t row0, const Slice& slice) {
  SY_CHECK(used_.insert(name).second, "weight '{}' is bound twice (a model definition error)", name);
  SY_CHECK(shape.rank() == 2, "FP8 weight '{}' of shape {} is not a matrix (a model definition error)", name,
           shape.str());
  const int64_t R = shape[0], C = shape[1];
  const int64_t r0 = !slice.whole() && slice.dim == 0 ? slice.start : 0;
  const int64_t rows = !slice.whole() && slice.dim == 0 ? slice.count : R;
  const int64_t c0 = !slice.whole() && slice.dim == 1 ? slice.start : 0;
  const int64_t cols = !slice.whole() && slice.dim == 1 ? slice.count : C;
  const int64_t br = quant_.block_rows, bc = quant_.block_cols;
  SY_CHECK(cols == dst.cols && row0 + rows <= dst.rows && row0 % br == 0 && cuts_no_block(slice, br, bc),
           "FP8 weight '{}' {} cut to [{}, {}] does not fit matrix rows {}.. of [{}, {}] in blocks of {}x{} "
           "(a model definition error)",
           name, shape.str(), rows, cols, row0, dst.rows, dst.cols, br, bc);
  const int64_t scale_rows = ceil_div_sat(rows, br), scale_cols = ceil_div_sat(cols, bc);
  const Matrix m = matrix_at(dst, index, row0);
  auto* bytes = static_cast<uint8_t*>(const_cast<void*>(m.w));
  auto* scales = const_cast<float*>(m.q.scales);
  if (checkpoint_ == nullptr) {
    if (store_.checks_only) return;
    backend_.fill_random_fp8({.dst = bytes,
                              .n = rows * cols,
                              .scales = scales,
                              .n_scales = scale_rows * scale_cols,
                              .seed = weight_seed(seed_, name, slice, "#fp8"),
                              .stddev = kFp8Spread,
                              .scale = kRandomWeightStddev / kFp8Spread});
    return;
  }
  const TensorInfo* t = check_tensor(name, shape);
  SY_CHECK(t->dtype == DType::f8_e4m3,
           "{}: tensor '{}' has dtype {}, but the weights stacked with it are block-scaled F8_E4M3; every part of "
           "a fused matrix must be stored alike",
           t->file, cut_for_message(name), dtype_name(t->dtype));
  const TensorInfo* s = check_fp8_scales(*t);
  used_.insert(s->name);
  store_.checkpoint_bytes +=
      static_cast<size_t>(rows * cols) + static_cast<size_t>(scale_rows * scale_cols) * dtype_size(s->dtype);
  if (store_.checks_only) return;
  show_progress(static_cast<size_t>(rows * cols));
  const auto* q = reinterpret_cast<const uint8_t*>(t->data);
  if (cols == C) {  // whole rows: one contiguous run straight from the mapping
    backend_.copy_to_device(bytes, q + r0 * C, static_cast<size_t>(rows * C));
  } else {
    byte_staging_.resize(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(q + (r0 + i) * C + c0, cols, byte_staging_.data() + i * cols);
    }
    backend_.copy_to_device(bytes, byte_staging_.data(), byte_staging_.size());
  }
  // The scale blocks of the slice (it cuts none), as fp32.
  const int64_t grid_cols = s->shape[1];
  scale_staging_.resize(static_cast<size_t>(s->shape.numel()));
  convert_to_f32(s->data, s->dtype, scale_staging_.data(), scale_staging_.size());
  std::vector<float> part(static_cast<size_t>(scale_rows * scale_cols));
  for (int64_t i = 0; i < scale_rows; ++i) {
    std::copy_n(scale_staging_.data() + (r0 / br + i) * grid_cols + c0 / bc, scale_cols, part.data() + i * scale_cols);
  }
  backend_.copy_to_device(scales, part.data(), part.size() * sizeof(float));
}

}  // namespace sy
