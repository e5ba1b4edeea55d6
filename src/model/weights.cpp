// WeightLoader: strict, named binding of checkpoint tensors to device memory.
#include "model/weights.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <new>

#include "base/check.h"
#include "base/input.h"
#include "base/int_math.h"
#include "base/log.h"

namespace sy {

namespace {
// What a dry run hands out instead of device memory: never null (blocks check their weights against
// null), never dereferenced.
alignas(64) std::byte placeholder_storage[64];
void* const kPlaceholder = placeholder_storage;

}  // namespace

uint64_t weight_seed(uint64_t seed, const std::string& name, const Slice& slice, std::string_view form) {
  std::string key = slice.whole() ? name
                                  : name + "#" + std::to_string(slice.dim) + ":" + std::to_string(slice.start) + "+" +
                                        std::to_string(slice.count);
  key += form;
  return seed * 0x9e3779b97f4a7c15ull ^ std::hash<std::string>{}(key);
}

std::string linear_module(const std::string& weight) { return weight.substr(0, weight.size() - 7); }

WeightLoader::WeightLoader(const Checkpoint* checkpoint, uint64_t seed, Backend& backend, WeightStore& store,
                           const ParallelGroups* groups)
    : checkpoint_(checkpoint),
      groups_(groups),
      plan_(make_shard_plan(nullptr, 0)),
      seed_(seed),
      backend_(backend),
      store_(store) {
  progress_on_ = checkpoint_ != nullptr && isatty(STDERR_FILENO) == 1 &&
                 (groups_ == nullptr || groups_->world == nullptr || groups_->world->rank() == 0);
  if (progress_on_) progress_total_ = checkpoint_->total_bytes();
}

void* WeightLoader::allocate(int64_t numel) {
  SY_CHECK(numel >= 0, "weight of {} elements (a model definition error)", numel);
  return allocate_bytes(static_cast<size_t>(numel) * dtype_size(backend_.weight_dtype()));
}

void* WeightLoader::allocate_bytes(size_t bytes) {
  if (store_.checks_only) return kPlaceholder;
  // Weights sized by config.json are bounded by the checkpoint they come from: a config that disagrees
  // with it is refused before it allocates more than the checkpoint could fill (the tensor that differs
  // is then named by fill).
  if (checkpoint_ != nullptr) {
    const size_t budget = 4 * checkpoint_->total_bytes() + (size_t{64} << 20);
    SY_CHECK(store_.bytes + bytes <= budget,
             "config.json describes more weights than checkpoint {} holds ({} bytes, more than 4x its {} bytes): "
             "the config and the checkpoint disagree",
             checkpoint_->dir().string(), store_.bytes + bytes, checkpoint_->total_bytes());
  }
  try {
    store_.buffers.push_back(backend_.alloc(bytes));
  } catch (const std::bad_alloc&) {
    SY_FAIL(
        "out of memory allocating {} bytes of weights ({} bytes held so far): the model described by "
        "config.json does not fit this machine",
        bytes, store_.bytes);
  }
  store_.bytes += bytes;
  return store_.buffers.back()->data();
}

void WeightLoader::zero(void* dst, int64_t numel) {
  if (store_.checks_only) return;
  backend_.zero(dst, static_cast<size_t>(numel) * dtype_size(backend_.weight_dtype()));
}

void* WeightLoader::at(void* base, int64_t i) const {
  if (store_.checks_only) return kPlaceholder;
  return static_cast<char*>(base) + static_cast<size_t>(i) * dtype_size(backend_.weight_dtype());
}

namespace {
// Elements of `shape` cut to `slice`.
int64_t slice_numel(const Shape& shape, const Slice& slice) {
  return slice.whole() ? shape.numel() : shape.numel() / shape[slice.dim] * slice.count;
}
}  // namespace

WeightPtr WeightLoader::bind(const std::string& name, const Shape& shape, WeightInit init, const Slice& slice) {
  if (checkpoint_ != nullptr) check_tensor(name, shape);  // before allocating what the config asks for
  void* dst = allocate(slice_numel(shape, slice));
  load_into(name, shape, dst, init, slice);
  return dst;
}

bool WeightLoader::has(const std::string& name) const {
  return checkpoint_ == nullptr || checkpoint_->find(name) != nullptr || checkpoint_->find(int4_packed_name(name));
}

const TensorInfo* WeightLoader::take(const std::string& name) {
  if (checkpoint_ == nullptr) return nullptr;
  const TensorInfo* t = checkpoint_->find(name);
  if (t != nullptr) used_.insert(t->name);
  return t;
}

std::string WeightLoader::source() const {
  return checkpoint_ == nullptr ? std::string("random weights") : checkpoint_->dir().string();
}

const float* WeightLoader::bind_f32(const std::string& name, const Shape& shape) {
  if (checkpoint_ != nullptr) check_tensor(name, shape);
  void* dst = allocate_bytes(static_cast<size_t>(shape.numel()) * sizeof(float));
  fill(name, shape, dst, WeightInit::normal, DType::f32, {});
  return static_cast<const float*>(dst);
}

void WeightLoader::load_into(const std::string& name, const Shape& shape, void* dst, WeightInit init,
                             const Slice& slice) {
  fill(name, shape, dst, init, backend_.weight_dtype(), slice);
}

void WeightLoader::fill(const std::string& name, const Shape& shape, void* dst, WeightInit init, DType target,
                        const Slice& slice) {
  SY_CHECK(used_.insert(name).second, "weight '{}' is bound twice (a model definition error)", name);
  SY_CHECK(slice.whole() || (slice.dim >= 0 && slice.dim < std::min(shape.rank(), 2) && slice.start >= 0 &&
                             slice.count > 0 && slice.start + slice.count <= shape[slice.dim]),
           "weight '{}' {}: slice of {} entries from {} along dimension {} is out of range (a model definition error)",
           name, shape.str(), slice.count, slice.start, slice.dim);
  const auto n = static_cast<size_t>(slice_numel(shape, slice));
  if (store_.checks_only && checkpoint_ == nullptr) return;
  if (checkpoint_ == nullptr) {
    const uint64_t seed = weight_seed(seed_, name, slice);
    switch (init) {
      case WeightInit::normal:
        if (target == backend_.weight_dtype()) {
          backend_.fill_random_normal(
              {.dst = dst, .n = static_cast<int64_t>(n), .seed = seed, .mean = 0.0f, .stddev = kRandomWeightStddev});
          return;
        }
        // fp32 copies of a GPU backend: draw on the host with the CPU backend's generator.
        staging_.resize(n);
        make_cpu_backend()->fill_random_normal(
            {.dst = staging_.data(), .n = static_cast<int64_t>(n), .seed = seed, .stddev = kRandomWeightStddev});
        upload_staging(dst, n, target);
        return;
      case WeightInit::ones:
      case WeightInit::zeros:
        staging_.assign(n, init == WeightInit::ones ? 1.0f : 0.0f);
        upload_staging(dst, n, target);
        return;
    }
  }
  const TensorInfo* t = check_tensor(name, shape);
  if (t->name != name) return fill_int4(name, shape, *t, dst, target, slice);
  if (t->dtype == DType::u8) return fill_nvfp4(name, shape, *t, dst, target, slice);
  const size_t esize = dtype_size(t->dtype);
  store_.checkpoint_bytes += n * esize;
  if (t->dtype == DType::f8_e4m3) return fill_fp8(*t, dst, target, slice);
  if (store_.checks_only) return;
  show_progress(n * esize);
  const auto* src = t->data;
  if (slice.whole() || slice.dim == 0) {  // one contiguous run of rows
    const size_t offset = slice.whole() ? 0 : static_cast<size_t>(slice.start * (shape.numel() / shape[0])) * esize;
    if (t->dtype == target) {  // no conversion: straight from the mapping
      backend_.copy_to_device(dst, src + offset, n * esize);
      return;
    }
    staging_.resize(n);
    convert_to_f32(src + offset, t->dtype, staging_.data(), n);
    upload_staging(dst, n, target);
    return;
  }
  // Columns [start, start + count) of every row of dimension 0.
  const int64_t outer = shape[0], inner = shape.numel() / (shape[0] * shape[1]);
  const auto run = static_cast<size_t>(slice.count * inner);
  staging_.resize(n);
  for (int64_t o = 0; o < outer; ++o) {
    const size_t from = static_cast<size_t>((o * shape[1] + slice.start) * inner) * esize;
    convert_to_f32(src + from, t->dtype, staging_.data() + static_cast<size_t>(o) * run, run);
  }
  upload_staging(dst, n, target);
}

const TensorInfo* WeightLoader::check_tensor(const std::string& name, const Shape& shape) const {
  const TensorInfo* t = checkpoint_->find(name);
  if (t == nullptr) {
    if (const TensorInfo* packed = checkpoint_->find(int4_packed_name(name))) return check_int4(name, shape, *packed);
  }
  SY_CHECK(t != nullptr,
           "checkpoint {} has no tensor '{}' (expected shape {}); is the checkpoint complete and of "
           "this architecture?",
           checkpoint_->dir().string(), name, shape.str());
  if (t->dtype == DType::u8) return check_nvfp4(name, shape, *t);
  SY_CHECK(t->shape == shape, "{}: tensor '{}' has shape {} but the config implies {}", t->file, name, t->shape.str(),
           shape.str());
  if (t->dtype == DType::f8_e4m3) {
    check_fp8_scales(*t);
    return t;
  }
  SY_CHECK(t->dtype == DType::f32 || t->dtype == DType::bf16 || t->dtype == DType::f16,
           "{}: tensor '{}' has dtype {}; weights are read from BF16, F16, F32, block-scaled F8_E4M3 and NVFP4 (U8) "
           "tensors",
           t->file, name, dtype_name(t->dtype));
  return t;
}

void WeightLoader::set_quant(const WeightQuant& quant) {
  SY_CHECK(!quant.block_fp8 || (quant.block_rows > 0 && quant.block_cols > 0),
           "FP8 block of {}x{} (a model definition error)", quant.block_rows, quant.block_cols);
  SY_CHECK(!quant.int4_group || quant.group_size > 0, "INT4 group of {} (a model definition error)", quant.group_size);
  SY_CHECK(!quant.nvfp4 || (quant.group_size > 0 && quant.group_size % 2 == 0),
           "NVFP4 group of {} (a model definition error)", quant.group_size);
  quant_ = quant;
}

namespace {
std::string scale_name(const std::string& weight) { return weight + "_scale_inv"; }
}  // namespace

const TensorInfo* WeightLoader::check_fp8_scales(const TensorInfo& t) const {
  SY_CHECK(quant_.block_fp8,
           "{}: tensor '{}' is F8_E4M3 but config.json has no quantization_config with quant_method \"fp8\" and "
           "weight_block_size, so its scales cannot be read; block-scaled FP8 (DeepSeek-V3's form) is the FP8 "
           "form switchyard reads",
           t.file, cut_for_message(t.name));
  SY_CHECK(t.shape.rank() == 2, "{}: F8_E4M3 tensor '{}' has shape {}; block-scaled FP8 weights are matrices", t.file,
           cut_for_message(t.name), t.shape.str());
  const std::string sn = scale_name(t.name);
  const TensorInfo* s = checkpoint_->find(sn);
  const Shape grid{ceil_div_sat(t.shape[0], quant_.block_rows), ceil_div_sat(t.shape[1], quant_.block_cols)};
  SY_CHECK(s != nullptr,
           "checkpoint {} has the F8_E4M3 weight '{}' {} but not its block scales '{}' (expected {} for blocks of "
           "{}x{}, quantization_config.weight_block_size)",
           checkpoint_->dir().string(), cut_for_message(t.name), t.shape.str(), cut_for_message(sn), grid.str(),
           quant_.block_rows, quant_.block_cols);
  SY_CHECK(s->shape == grid,
           "{}: block scales '{}' have shape {}, but weight {} in blocks of {}x{} "
           "(quantization_config.weight_block_size) needs {}",
           s->file, cut_for_message(sn), s->shape.str(), t.shape.str(), quant_.block_rows, quant_.block_cols,
           grid.str());
  SY_CHECK(s->dtype == DType::f32 || s->dtype == DType::bf16,
           "{}: block scales '{}' have dtype {}; expected F32 or BF16", s->file, cut_for_message(sn),
           dtype_name(s->dtype));
  return s;
}

void WeightLoader::fill_fp8(const TensorInfo& t, void* dst, DType target, const Slice& slice) {
  const TensorInfo* s = check_fp8_scales(t);
  used_.insert(s->name);
  const int64_t R = t.shape[0], C = t.shape[1];
  const int64_t row0 = !slice.whole() && slice.dim == 0 ? slice.start : 0;
  const int64_t rows = !slice.whole() && slice.dim == 0 ? slice.count : R;
  const int64_t col0 = !slice.whole() && slice.dim == 1 ? slice.start : 0;
  const int64_t cols = !slice.whole() && slice.dim == 1 ? slice.count : C;
  // The scale blocks the slice touches, as the planner counts them for a rank's share.
  const int64_t block_rows = (row0 + rows - 1) / quant_.block_rows - row0 / quant_.block_rows + 1;
  const int64_t block_cols = (col0 + cols - 1) / quant_.block_cols - col0 / quant_.block_cols + 1;
  store_.checkpoint_bytes += static_cast<size_t>(block_rows * block_cols) * dtype_size(s->dtype);
  if (store_.checks_only) return;
  show_progress(static_cast<size_t>(rows * cols));
  dequantise_fp8(t, *s, row0, rows, col0, cols);
  upload_staging(dst, static_cast<size_t>(rows * cols), target);
}

void WeightLoader::dequantise_fp8(const TensorInfo& t, const TensorInfo& scales, int64_t row0, int64_t rows,
                                  int64_t col0, int64_t cols) {
  const int64_t C = t.shape[1], grid_cols = scales.shape[1];
  scale_staging_.resize(static_cast<size_t>(scales.shape.numel()));
  convert_to_f32(scales.data, scales.dtype, scale_staging_.data(), scale_staging_.size());
  staging_.resize(static_cast<size_t>(rows * cols));
  const auto* q = reinterpret_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row0 + i;
    const float* scale_row = scale_staging_.data() + (r / quant_.block_rows) * grid_cols;
    float* out = staging_.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t c = col0 + j;
      out[j] = f8_e4m3_to_f32(q[r * C + c]) * scale_row[c / quant_.block_cols];
    }
  }
}

void WeightLoader::upload_staging(void* dst, size_t n, DType target) {
  switch (target) {
    case DType::f32:
      backend_.copy_to_device(dst, staging_.data(), n * sizeof(float));
      return;
    case DType::bf16:
      staging16_.resize(n);
      for (size_t i = 0; i < n; ++i) staging16_[i] = f32_to_bf16(staging_[i]);
      backend_.copy_to_device(dst, staging16_.data(), n * sizeof(uint16_t));
      return;
    case DType::f16:
    case DType::f8_e4m3:
    case DType::f8_e5m2:
    case DType::f64:
    case DType::i64:
    case DType::i32:
    case DType::i16:
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      break;
  }
  SY_FAIL("weights of dtype {} are not supported by this loader", dtype_name(target));
}

void WeightLoader::skip_prefix(const std::string& prefix) { skipped_prefixes_.push_back(prefix); }

void WeightLoader::show_progress(size_t bytes) {
  if (!progress_on_) return;
  progress_done_ += bytes;
  const int percent = static_cast<int>(100.0 * static_cast<double>(std::min(progress_done_, progress_total_)) /
                                       static_cast<double>(std::max<size_t>(progress_total_, 1)));
  if (percent == progress_shown_) return;
  progress_shown_ = percent;
  constexpr int kWidth = 40;
  const int filled = percent * kWidth / 100;
  const bool gb = progress_total_ >= 1'000'000'000;
  const double unit = gb ? 1e9 : 1e6;
  std::fprintf(stderr, "\rloading weights [%.*s%*s] %3d%% %.1f / %.1f %s", filled,
               "########################################", kWidth - filled, "", percent,
               static_cast<double>(progress_done_) / unit, static_cast<double>(progress_total_) / unit,
               gb ? "GB" : "MB");
  std::fflush(stderr);
}

void WeightLoader::finish() {
  if (progress_shown_ >= 0) std::fputc('\n', stderr);
  progress_on_ = false;
  staging_ = {};
  staging16_ = {};
  if (checkpoint_ == nullptr) return;
  std::vector<std::string> unused;
  size_t skipped = 0;
  for (const TensorInfo* t : checkpoint_->tensors()) {
    if (used_.count(t->name)) continue;
    bool skip = false;
    for (const auto& p : skipped_prefixes_) skip = skip || t->name.rfind(p, 0) == 0;
    if (skip) {
      ++skipped;
    } else {
      unused.push_back(t->file + ": '" + cut_for_message(t->name) + "'");
    }
  }
  if (skipped) log_info("left {} checkpoint tensors unloaded on purpose", skipped);
  if (!unused.empty()) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
    SY_FAIL(
        "checkpoint {} has {} tensor(s) this architecture does not use: {}{}; the checkpoint and config.json "
        "disagree",
        checkpoint_->dir().string(), unused.size(), list, unused.size() > 8 ? ", ..." : "");
  }
}

}  // namespace sy
