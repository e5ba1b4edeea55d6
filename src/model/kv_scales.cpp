// FP8 KV-cache scales from the checkpoint (model/kv_scales.h).
#include "model/kv_scales.h"

#include <cmath>
#include <optional>
#include <string>

#include "base/check.h"
#include "base/input.h"
#include "base/log.h"

namespace sy {

namespace {

constexpr const char* kWhatToDo =
    "give every attention layer its scales or remove them all (scale 1.0), or run with --kv-dtype bf16";

struct FoundScale {
  std::string name;
  float value = 1.0f;
};

// The tensor `t` as a per-tensor scale.
float scale_value(const TensorInfo& t) {
  SY_CHECK((t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16) && t.shape.rank() <= 1 &&
               t.shape.numel() == 1,
           "{}: the FP8 KV-cache scale '{}' is {} {}; it must be a scalar (shape [] or [1]) of F32, BF16 or F16: {}",
           t.file, cut_for_message(t.name), dtype_name(t.dtype), t.shape.str(), kWhatToDo);
  float v = 0.0f;
  convert_to_f32(t.data, t.dtype, &v, 1);
  SY_CHECK(std::isfinite(v) && v > 0.0f,
           "{}: the FP8 KV-cache scale '{}' is {}; it must be positive and finite (stored = e4m3(x / scale)): {}",
           t.file, cut_for_message(t.name), v, kWhatToDo);
  return v;
}

// The one of `names` the checkpoint holds (each taken, so that none counts as unused), or none.
std::optional<FoundScale> take_scale(WeightLoader& loader, const std::vector<std::string>& names, bool read) {
  std::optional<FoundScale> found;
  for (const std::string& n : names) {
    const TensorInfo* t = loader.take(n);
    if (t == nullptr) continue;
    SY_CHECK(!found, "{}: the checkpoint gives one FP8 KV-cache scale twice, as '{}' and '{}'; keep one of them",
             t->file, cut_for_message(found->name), cut_for_message(n));
    found = FoundScale{.name = n, .value = read ? scale_value(*t) : 1.0f};
  }
  return found;
}

}  // namespace

std::vector<KvQuant> read_kv_scales(WeightLoader& loader, int64_t n_layers, AttentionKind kind, bool fp8) {
  const bool mla = kind == AttentionKind::mla;
  std::vector<KvQuant> out(static_cast<size_t>(n_layers), KvQuant{.e4m3 = fp8});
  if (loader.random()) return out;
  struct Layer {
    std::optional<FoundScale> k, v;
    std::vector<std::string> k_names, v_names;
  };
  std::vector<Layer> layers(static_cast<size_t>(n_layers));
  int64_t with_scales = 0;
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
    Layer& l = layers[static_cast<size_t>(i)];
    l.k_names = {p + "k_proj.k_scale", p + "k_scale", p + "kv_scale"};
    l.v_names = {p + "v_proj.v_scale", p + "v_scale"};
    l.k = take_scale(loader, l.k_names, fp8);
    l.v = take_scale(loader, l.v_names, fp8 && !mla);
    if (!l.v && l.k && l.k->name == p + "kv_scale") l.v = l.k;  // the older single scale of K and V
    if (l.k || l.v) ++with_scales;
    l.v_names.push_back(p + "kv_scale");
  }
  if (!fp8) return out;
  if (with_scales == 0) {
    log_info("the checkpoint has no FP8 KV-cache scales: every layer's K and V are stored with scale 1.0");
    return out;
  }
  for (int64_t i = 0; i < n_layers; ++i) {
    const Layer& l = layers[static_cast<size_t>(i)];
    const auto missing = [&](const std::vector<std::string>& names) {
      std::string s;
      for (const auto& n : names) s += (s.empty() ? "'" : " or '") + n + "'";
      return s;
    };
    SY_CHECK(l.k.has_value(),
             "checkpoint {} has FP8 KV-cache scales for {} of its {} layers, but layer {} has no k scale ({}): {}",
             loader.source(), with_scales, n_layers, i, missing(l.k_names), kWhatToDo);
    SY_CHECK(mla || l.v.has_value(),
             "checkpoint {} has FP8 KV-cache scales for {} of its {} layers, but layer {} has no v scale ({}): {}",
             loader.source(), with_scales, n_layers, i, missing(l.v_names), kWhatToDo);
    KvQuant& q = out[static_cast<size_t>(i)];
    q.k_scale = l.k->value;
    q.v_scale = mla ? 1.0f : l.v->value;
  }
  log_info("FP8 KV cache: per-tensor scales of {} layers from the checkpoint", n_layers);
  return out;
}

}  // namespace sy
