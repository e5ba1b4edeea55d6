// WeightLoader: strict, named binding of checkpoint tensors to device memory.
#include "model/weights.h"

#include <functional>

#include "base/check.h"
#include "base/log.h"

namespace sy {

namespace {
constexpr float kRandomStddev = 0.02f;

uint64_t name_seed(uint64_t seed, const std::string& name) {
  return seed * 0x9e3779b97f4a7c15ull ^ std::hash<std::string>{}(name);
}
}  // namespace

WeightLoader::WeightLoader(const Checkpoint* checkpoint, uint64_t seed, Backend& backend, WeightStore& store)
    : checkpoint_(checkpoint), seed_(seed), backend_(backend), store_(store) {}

void* WeightLoader::allocate(int64_t numel) {
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(backend_.weight_dtype());
  store_.buffers.push_back(backend_.alloc(bytes));
  store_.bytes += bytes;
  return store_.buffers.back()->data();
}

void* WeightLoader::at(void* base, int64_t i) const {
  return static_cast<char*>(base) + static_cast<size_t>(i) * dtype_size(backend_.weight_dtype());
}

WeightPtr WeightLoader::bind(const std::string& name, const Shape& shape, WeightInit init) {
  void* dst = allocate(shape.numel());
  load_into(name, shape, dst, init);
  return dst;
}

bool WeightLoader::has(const std::string& name) const {
  return checkpoint_ == nullptr || checkpoint_->find(name) != nullptr;
}

const float* WeightLoader::bind_f32(const std::string& name, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
  store_.buffers.push_back(backend_.alloc(bytes));
  store_.bytes += bytes;
  void* dst = store_.buffers.back()->data();
  fill(name, shape, dst, WeightInit::normal, DType::f32);
  return static_cast<const float*>(dst);
}

void WeightLoader::load_into(const std::string& name, const Shape& shape, void* dst, WeightInit init) {
  fill(name, shape, dst, init, backend_.weight_dtype());
}

void WeightLoader::fill(const std::string& name, const Shape& shape, void* dst, WeightInit init, DType target) {
  SY_CHECK(used_.insert(name).second, "weight '{}' is bound twice (a model definition error)", name);
  const auto n = static_cast<size_t>(shape.numel());
  if (checkpoint_ == nullptr) {
    switch (init) {
      case WeightInit::normal:
        if (target == backend_.weight_dtype()) {
          backend_.fill_random_normal({.dst = dst, .n = shape.numel(), .seed = name_seed(seed_, name),
                                       .mean = 0.0f, .stddev = kRandomStddev});
          return;
        }
        // fp32 copies of a GPU backend: draw on the host with the CPU backend's generator.
        staging_.resize(n);
        make_cpu_backend()->fill_random_normal({.dst = staging_.data(), .n = shape.numel(),
                                                .seed = name_seed(seed_, name), .stddev = kRandomStddev});
        upload_staging(dst, n, target);
        return;
      case WeightInit::ones:
      case WeightInit::zeros:
        staging_.assign(n, init == WeightInit::ones ? 1.0f : 0.0f);
        upload_staging(dst, n, target);
        return;
    }
  }
  const TensorInfo* t = checkpoint_->find(name);
  SY_CHECK(t != nullptr, "checkpoint {} has no tensor '{}' (expected shape {}); is the checkpoint complete and of "
           "this architecture?", checkpoint_->dir().string(), name, shape.str());
  SY_CHECK(t->shape == shape, "{}: tensor '{}' has shape {} but the config implies {}", t->file, name, t->shape.str(),
           shape.str());
  SY_CHECK(t->dtype == DType::f32 || t->dtype == DType::bf16 || t->dtype == DType::f16, "{}: tensor '{}' has dtype {}; "
           "the CPU backend computes BF16, F16 and F32 weights only (FP8 checkpoints are parsed but not yet computed)",
           t->file, name, dtype_name(t->dtype));
  if (t->dtype == target) {  // no conversion: straight from the mapping
    backend_.copy_to_device(dst, t->data, t->nbytes);
    return;
  }
  staging_.resize(n);
  convert_to_f32(t->data, t->dtype, staging_.data(), n);
  upload_staging(dst, n, target);
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

void WeightLoader::finish() {
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
      unused.push_back(t->file + ": '" + t->name + "'");
    }
  }
  if (skipped) log_info("left {} checkpoint tensors unloaded on purpose", skipped);
  if (!unused.empty()) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
    SY_FAIL("checkpoint {} has {} tensor(s) this architecture does not use: {}{}; the checkpoint and config.json "
            "disagree",
            checkpoint_->dir().string(), unused.size(), list, unused.size() > 8 ? ", ..." : "");
  }
}

}  // namespace sy
