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

float* WeightLoader::allocate(int64_t numel) {
  const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
  store_.buffers.push_back(backend_.alloc(bytes));
  store_.bytes += bytes;
  return store_.buffers.back()->as<float>();
}

float* WeightLoader::bind(const std::string& name, const Shape& shape, WeightInit init) {
  float* dst = allocate(shape.numel());
  load_into(name, shape, dst, init);
  return dst;
}

bool WeightLoader::has(const std::string& name) const {
  return checkpoint_ == nullptr || checkpoint_->find(name) != nullptr;
}

void WeightLoader::load_into(const std::string& name, const Shape& shape, float* dst, WeightInit init) {
  SY_CHECK(used_.insert(name).second, "weight '{}' is bound twice (a model definition error)", name);
  const auto n = static_cast<size_t>(shape.numel());
  if (checkpoint_ == nullptr) {
    switch (init) {
      case WeightInit::normal:
        backend_.fill_random_normal({.dst = dst, .n = shape.numel(), .seed = name_seed(seed_, name),
                                     .mean = 0.0f, .stddev = kRandomStddev});
        return;
      case WeightInit::ones:
      case WeightInit::zeros:
        staging_.assign(n, init == WeightInit::ones ? 1.0f : 0.0f);
        backend_.copy_to_device(dst, staging_.data(), n * sizeof(float));
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
  staging_.resize(n);
  convert_to_f32(t->data, t->dtype, staging_.data(), n);
  backend_.copy_to_device(dst, staging_.data(), n * sizeof(float));
}

void WeightLoader::skip_prefix(const std::string& prefix) { skipped_prefixes_.push_back(prefix); }

void WeightLoader::finish() {
  staging_ = {};
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
