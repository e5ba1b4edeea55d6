// INT4 weights of compressed-tensors pack-quantized checkpoints (../shared/quant-formats.md, B), checked
// against their config and dequantised at load: W[r, k] = (nibble k of row r − 8) · weight_scale[r, k / g].
#include <cstring>
#include <numeric>

#include "base/check.h"
#include "base/input.h"
#include "base/int_math.h"
#include "model/weights.h"

namespace sy {

namespace {

constexpr const char* kForm = "compressed-tensors pack-quantized INT4 (symmetric, group-wise)";

}  // namespace

std::string int4_packed_name(const std::string& weight) {
  return weight.ends_with(".weight") ? linear_module(weight) + ".weight_packed" : std::string();
}

const TensorInfo* WeightLoader::check_int4(const std::string& name, const Shape& shape,
                                           const TensorInfo& packed) const {
  const std::string module = linear_module(name);
  SY_CHECK(quant_.int4_group,
           "{}: checkpoint {} stores '{}' as INT4 ('{}'), but config.json's quantization_config (method '{}') is not "
           "the {} form switchyard reads; is quantization_config missing or of another scheme?",
           packed.file, checkpoint_->dir().string(), cut_for_message(name), cut_for_message(packed.name),
           cut_for_message(quant_.method.empty() ? "none" : quant_.method), kForm);
  SY_CHECK(quant_.quantises(name),
           "{}: '{}' is stored as INT4 ('{}'), but quantization_config's targets and ignore list leave module '{}' "
           "unquantised; the checkpoint and its config.json disagree",
           packed.file, cut_for_message(name), cut_for_message(packed.name), cut_for_message(module));
  SY_CHECK(shape.rank() == 2, "'{}' has shape {} in the config; INT4 weights are matrices [out, in]",
           cut_for_message(name), shape.str());
  const int64_t out = shape[0], in = shape[1], g = quant_.group_size;
  const Shape words{out, ceil_div_sat(in, 8)};
  SY_CHECK(packed.dtype == DType::i32 && packed.shape == words,
           "{}: '{}' is {} {}; the INT4 weight {} {} needs I32 {} (eight 4-bit values per word)", packed.file,
           cut_for_message(packed.name), dtype_name(packed.dtype), packed.shape.str(), cut_for_message(name),
           shape.str(), words.str());
  const std::string scale_name = module + ".weight_scale";
  const TensorInfo* scale = checkpoint_->find(scale_name);
  const Shape groups{out, ceil_div_sat(in, g)};
  SY_CHECK(scale != nullptr,
           "checkpoint {} has the INT4 weight '{}' but not its group scales '{}' ({} for groups of {})",
           checkpoint_->dir().string(), cut_for_message(packed.name), cut_for_message(scale_name), groups.str(), g);
  SY_CHECK(scale->shape == groups,
           "{}: group scales '{}' have shape {}, but weight {} in groups of {} (config_groups weights.group_size) "
           "needs {}",
           scale->file, cut_for_message(scale_name), scale->shape.str(), shape.str(), g, groups.str());
  SY_CHECK(scale->dtype == DType::bf16 || scale->dtype == DType::f16 || scale->dtype == DType::f32,
           "{}: group scales '{}' have dtype {}; expected BF16, F16 or F32", scale->file, cut_for_message(scale_name),
           dtype_name(scale->dtype));
  const std::string shape_name = module + ".weight_shape";
  const TensorInfo* ws = checkpoint_->find(shape_name);
  SY_CHECK(ws != nullptr, "checkpoint {} has the INT4 weight '{}' but not its shape '{}' (I64 [2] = [{}, {}])",
           checkpoint_->dir().string(), cut_for_message(packed.name), cut_for_message(shape_name), out, in);
  SY_CHECK((ws->dtype == DType::i64 || ws->dtype == DType::i32) && ws->shape == Shape{2},
           "{}: '{}' is {} {}; expected I64 [2] holding the weight's [out, in]", ws->file, cut_for_message(shape_name),
           dtype_name(ws->dtype), ws->shape.str());
  int64_t dims[2];
  for (int64_t i = 0; i < 2; ++i) {
    if (ws->dtype == DType::i64) {
      std::memcpy(&dims[i], ws->data + i * 8, 8);
    } else {
      int32_t v = 0;
      std::memcpy(&v, ws->data + i * 4, 4);
      dims[i] = v;
    }
  }
  SY_CHECK(dims[0] == out && dims[1] == in, "{}: '{}' says [{}, {}], but the config implies the weight is {}", ws->file,
           cut_for_message(shape_name), dims[0], dims[1], shape.str());
  return &packed;
}

void WeightLoader::fill_int4(const std::string& name, const Shape& shape, const TensorInfo& packed, void* dst,
                             DType target, const Slice& slice) {
  const std::string module = linear_module(name);
  const TensorInfo& scale = *checkpoint_->find(module + ".weight_scale");
  used_.insert(packed.name);
  used_.insert(scale.name);
  used_.insert(module + ".weight_shape");  // checked, not kept: 16 bytes of metadata
  const int64_t out = shape[0], in = shape[1], g = quant_.group_size;
  const int64_t row0 = !slice.whole() && slice.dim == 0 ? slice.start : 0;
  const int64_t rows = !slice.whole() && slice.dim == 0 ? slice.count : out;
  const int64_t col0 = !slice.whole() && slice.dim == 1 ? slice.start : 0;
  const int64_t cols = !slice.whole() && slice.dim == 1 ? slice.count : in;
  // A column cut holds whole groups and whole words, as the planner's quant_group rule asks of a layout.
  const int64_t align = std::lcm(g, int64_t{8});
  SY_CHECK(col0 % align == 0 && (cols % align == 0 || col0 + cols == in),
           "'{}' {}: a shard of columns [{}, {}) cuts an INT4 group of {} (or a word of 8); choose a layout whose "
           "split of this weight's input dimension is a multiple of {}",
           cut_for_message(name), shape.str(), col0, col0 + cols, g, align);
  const auto esize = static_cast<int64_t>(dtype_size(scale.dtype));
  store_.checkpoint_bytes +=
      static_cast<size_t>(rows * ceil_div_sat(cols, 8) * 4 + rows * ceil_div_sat(cols, g) * esize);
  if (store_.checks_only) return;
  show_progress(static_cast<size_t>(rows * ceil_div_sat(cols, 8) * 4));
  const int64_t words = ceil_div_sat(in, 8), n_groups = ceil_div_sat(in, g);
  scale_staging_.resize(static_cast<size_t>(rows * n_groups));
  convert_to_f32(scale.data + static_cast<size_t>(row0 * n_groups * esize), scale.dtype, scale_staging_.data(),
                 scale_staging_.size());
  staging_.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const std::byte* row = packed.data + static_cast<size_t>((row0 + i) * words * 4);
    const float* s = scale_staging_.data() + i * n_groups;
    float* o = staging_.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = col0 + j;
      uint32_t word = 0;
      std::memcpy(&word, row + (k / 8) * 4, 4);  // little-endian, as safetensors stores it
      const auto q = static_cast<int32_t>((word >> (4 * (k % 8))) & 0xF) - 8;
      o[j] = static_cast<float>(q) * s[k / g];
    }
  }
  upload_staging(dst, static_cast<size_t>(rows * cols), target);
}

}  // namespace sy
