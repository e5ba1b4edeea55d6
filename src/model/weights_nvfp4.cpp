// NVFP4 weights of NVIDIA ModelOpt checkpoints (../shared/quant-formats.md, C), checked against their config
// and dequantised at load: W[r, k] = e2m1(nibble k of row r) · e4m3(weight_scale[r, k / g]) · weight_scale_2,
// element 2j in the low nibble of byte j, 2j + 1 in the high one.
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/input.h"
#include "base/int_math.h"
#include "model/weights.h"

namespace sy {

namespace {

constexpr const char* kForm = "NVIDIA ModelOpt NVFP4 (hf_quant_config.json quant_algo \"NVFP4\")";

// A per-tensor F32 scale: shape [] or [1], finite and positive.
float read_scalar(const TensorInfo& t, const std::string& weight) {
  SY_CHECK(t.dtype == DType::f32 && t.shape.numel() == 1 && t.shape.rank() <= 1,
           "{}: '{}' is {} {}; the NVFP4 weight '{}' needs an F32 scalar (shape [] or [1])", t.file,
           cut_for_message(t.name), dtype_name(t.dtype), t.shape.str(), cut_for_message(weight));
  float v = 0.0f;
  std::memcpy(&v, t.data, sizeof v);
  SY_CHECK(std::isfinite(v) && v > 0.0f, "{}: '{}' is {}; a per-tensor scale must be finite and positive", t.file,
           cut_for_message(t.name), v);
  return v;
}

}  // namespace

const TensorInfo* WeightLoader::check_nvfp4(const std::string& name, const Shape& shape,
                                            const TensorInfo& packed) const {
  const std::string module = linear_module(name);
  SY_CHECK(quant_.nvfp4,
           "{}: checkpoint {} stores '{}' as U8 {}, which only the {} form holds, but the model folder's quantization "
           "config (method '{}') is not that form; is hf_quant_config.json missing or of another scheme?",
           packed.file, checkpoint_->dir().string(), cut_for_message(name), packed.shape.str(), kForm,
           cut_for_message(quant_.method.empty() ? "none" : quant_.method));
  SY_CHECK(quant_.quantises(name),
           "{}: '{}' is stored as NVFP4 (U8 {}), but exclude_modules leaves module '{}' unquantised; the checkpoint "
           "and its quantization config disagree",
           packed.file, cut_for_message(name), packed.shape.str(), cut_for_message(module));
  SY_CHECK(shape.rank() == 2, "'{}' has shape {} in the config; NVFP4 weights are matrices [out, in]",
           cut_for_message(name), shape.str());
  const int64_t out = shape[0], in = shape[1], g = quant_.group_size;
  SY_CHECK(in % g == 0, "'{}' {}: its {} input columns are not whole NVFP4 groups of {}", cut_for_message(name),
           shape.str(), in, g);
  const Shape pairs{out, in / 2};
  SY_CHECK(packed.shape == pairs, "{}: '{}' is U8 {}; the NVFP4 weight {} needs U8 {} (two 4-bit values per byte)",
           packed.file, cut_for_message(packed.name), packed.shape.str(), shape.str(), pairs.str());
  const std::string scale_name = module + ".weight_scale";
  const TensorInfo* scale = checkpoint_->find(scale_name);
  const Shape groups{out, in / g};
  SY_CHECK(scale != nullptr,
           "checkpoint {} has the NVFP4 weight '{}' but not its group scales '{}' (F8_E4M3 {} for groups of {})",
           checkpoint_->dir().string(), cut_for_message(name), cut_for_message(scale_name), groups.str(), g);
  SY_CHECK(scale->dtype == DType::f8_e4m3 && scale->shape == groups,
           "{}: group scales '{}' are {} {}, but weight {} in groups of {} (group_size) needs F8_E4M3 {}", scale->file,
           cut_for_message(scale_name), dtype_name(scale->dtype), scale->shape.str(), shape.str(), g, groups.str());
  const std::string scale2_name = module + ".weight_scale_2";
  const TensorInfo* scale2 = checkpoint_->find(scale2_name);
  SY_CHECK(scale2 != nullptr, "checkpoint {} has the NVFP4 weight '{}' but not its per-tensor scale '{}' (F32 [])",
           checkpoint_->dir().string(), cut_for_message(name), cut_for_message(scale2_name));
  read_scalar(*scale2, name);
  if (const TensorInfo* input = checkpoint_->find(module + ".input_scale")) read_scalar(*input, name);
  return &packed;
}

void WeightLoader::fill_nvfp4(const std::string& name, const Shape& shape, const TensorInfo& packed, void* dst,
                              DType target, const Slice& slice) {
  const std::string module = linear_module(name);
  const TensorInfo& scale = *checkpoint_->find(module + ".weight_scale");
  const TensorInfo& scale2 = *checkpoint_->find(module + ".weight_scale_2");
  const TensorInfo* input = checkpoint_->find(module + ".input_scale");
  used_.insert(scale.name);
  used_.insert(scale2.name);
  // The activation scale is checked and not used: on Hopper the arithmetic is weight-only (no FP4 tensor
  // cores), as vLLM's and SGLang's fallbacks do.
  if (input != nullptr) used_.insert(input->name);
  const int64_t out = shape[0], in = shape[1], g = quant_.group_size;
  const int64_t row0 = !slice.whole() && slice.dim == 0 ? slice.start : 0;
  const int64_t rows = !slice.whole() && slice.dim == 0 ? slice.count : out;
  const int64_t col0 = !slice.whole() && slice.dim == 1 ? slice.start : 0;
  const int64_t cols = !slice.whole() && slice.dim == 1 ? slice.count : in;
  // A column cut holds whole groups, as the planner's quant_group rule asks of a layout.
  SY_CHECK(col0 % g == 0 && cols % g == 0,
           "'{}' {}: a shard of columns [{}, {}) cuts an NVFP4 group of {}; choose a layout whose split of this "
           "weight's input dimension is a multiple of {}",
           cut_for_message(name), shape.str(), col0, col0 + cols, g, g);
  store_.checkpoint_bytes += static_cast<size_t>(rows * cols / 2 + rows * cols / g + (input != nullptr ? 8 : 4));
  if (store_.checks_only) return;
  show_progress(static_cast<size_t>(rows * cols / 2));
  float global = 0.0f;
  std::memcpy(&global, scale2.data, sizeof global);
  const int64_t bytes_per_row = in / 2, n_groups = in / g;
  staging_.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const auto* row = reinterpret_cast<const uint8_t*>(packed.data) + (row0 + i) * bytes_per_row;
    const auto* s = reinterpret_cast<const uint8_t*>(scale.data) + (row0 + i) * n_groups;
    float* o = staging_.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t k = col0 + j;
      const uint8_t nibble = (row[k / 2] >> (4 * (k % 2))) & 0xF;
      o[j] = f4_e2m1_to_f32(nibble) * (f8_e4m3_to_f32(s[k / g]) * global);
    }
  }
  upload_staging(dst, static_cast<size_t>(rows * cols), target);
}

}  // namespace sy
