// quantization_config: the FP8 block, compressed-tensors INT4 and ModelOpt NVFP4 forms, and which modules
// they cover.
#include "arch/quant.h"

#include <fnmatch.h>

#include <optional>
#include <regex>

#include "base/check.h"
#include "base/input.h"
#include "base/int_math.h"

namespace sy {

struct WeightQuant::Patterns {
  std::vector<std::regex> targets;
  std::vector<std::regex> ignore;
};

namespace {

constexpr std::string_view kRegexPrefix = "re:";

// The patterns among `entries`: those marked "re:" (compressed-tensors), or every entry (FP8's lists, which
// transformers matches as regular expressions).
std::vector<std::regex> compile(const std::vector<std::string>& entries, bool all, const std::string& source,
                                const char* key) {
  std::vector<std::regex> out;
  for (const std::string& e : entries) {
    if (!all && !e.starts_with(kRegexPrefix)) continue;
    try {
      out.emplace_back(all ? e : e.substr(kRegexPrefix.size()), std::regex::ECMAScript);
    } catch (const std::regex_error& err) {
      SY_FAIL("{}: {} entry '{}' is not a regular expression this engine reads ({})", source, key, cut_for_message(e),
              err.what());
    }
  }
  return out;
}

bool any_regex(const std::vector<std::regex>& res, const std::string& module) {
  for (const std::regex& re : res) {
    if (std::regex_search(module, re, std::regex_constants::match_continuous)) return true;
  }
  return false;
}

// Whether one of `res` matches a prefix of `module` that ends at a module boundary: the end of the name, just
// before a dot or just after one (Python's re.match(rf"(?:{key})(?:(?<=\.)|(?=\.|$))", module)).
bool any_regex_to_boundary(const std::vector<std::regex>& res, const std::string& module) {
  for (const std::regex& re : res) {
    for (size_t end = 0; end <= module.size(); ++end) {
      const bool boundary = end == module.size() || module[end] == '.' || (end > 0 && module[end - 1] == '.');
      if (boundary && std::regex_match(module.begin(), module.begin() + static_cast<std::ptrdiff_t>(end), re)) {
        return true;
      }
    }
  }
  return false;
}

// compressed-tensors: an entry names the module, its class ("Linear": every linear weight), or is a pattern.
bool names(const std::vector<std::string>& entries, const std::vector<std::regex>& res, const std::string& module) {
  for (const std::string& e : entries) {
    if (e == module || e == "Linear") return true;
  }
  return any_regex(res, module);
}

// The compressed-tensors pack-quantized INT4 scheme, or nothing when `q` holds another one.
void read_compressed_tensors(const ConfigJson& q, WeightQuant& quant) {
  if (q.get_string("format", "") != "pack-quantized") return;
  SY_CHECK(q.get_string("quantization_status", "compressed") == "compressed",
           "{}: quantization_status '{}': switchyard reads compressed checkpoints (weight_packed), not '{}' ones",
           q.source(), cut_for_message(q.get_string("quantization_status", "")),
           cut_for_message(q.get_string("quantization_status", "")));
  const std::optional<ConfigJson> groups = q.child("config_groups");
  SY_CHECK(groups.has_value() && !groups->keys().empty(), "{}: compressed-tensors config has no config_groups",
           q.source());
  int64_t group_size = 0;
  for (const std::string& name : groups->keys()) {
    const ConfigJson g = *groups->child(name);
    const std::optional<ConfigJson> w = g.child("weights");
    // Only weight-only, symmetric, 4-bit integer, group-wise, static schemes: the published Kimi form.
    if (!w || g.has("input_activations") || g.has("output_activations") || w->get_int("num_bits", 0, 0) != 4 ||
        w->get_string("type", "int") != "int" || !w->get_bool("symmetric", true) ||
        w->get_string("strategy", "") != "group" || w->get_bool("dynamic", false) || w->has("actorder")) {
      return;
    }
    const int64_t gs = w->get_int("group_size", 1);
    if (group_size != 0 && gs != group_size) return;
    group_size = gs;
    for (std::string& t : g.get_string_list("targets")) quant.targets.push_back(std::move(t));
  }
  quant.int4_group = true;
  quant.group_size = group_size;
  quant.ignore = q.get_string_list("ignore");
}

// ModelOpt: hf_quant_config.json's "quantization" object, or config.json's quantization_config with
// quant_method "modelopt". NVFP4 only; another quant_algo is recorded by name and refused where read.
void read_modelopt(const ConfigJson& q, WeightQuant& quant) {
  const std::string algo = q.get_string("quant_algo", "");
  quant.method = "modelopt " + (algo.empty() ? std::string("(no quant_algo)") : cut_for_message(algo));
  if (algo != "NVFP4") return;
  quant.nvfp4 = true;
  quant.group_size = q.get_int("group_size", 16, 1);
  SY_CHECK(quant.group_size % 2 == 0,
           "{}: NVFP4 group_size {} is odd; the packed E2M1 pairs need an even group (published: 16)", q.source(),
           quant.group_size);
  quant.ignore = q.has("exclude_modules") ? q.get_string_list("exclude_modules") : q.get_string_list("ignore");
  if (q.has("kv_cache_quant_algo")) {
    quant.kv_cache_quant = q.get_string("kv_cache_quant_algo", "");
  } else if (const std::optional<ConfigJson> kv = q.child("kv_cache_scheme")) {
    quant.kv_cache_quant = kv->get_string("type", "float") + std::to_string(kv->get_int("num_bits", 8, 1));
  }
}

bool any_wildcard(const std::vector<std::string>& patterns, const std::string& module) {
  for (const std::string& p : patterns) {
    if (::fnmatch(p.c_str(), module.c_str(), 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool WeightQuant::quantises(const std::string& weight) const {
  if (!block_fp8 && !int4_group && !nvfp4) return false;
  const std::string module = weight.ends_with(".weight") ? weight.substr(0, weight.size() - 7) : weight;
  for (const std::string& e : unquantised_suffixes) {
    if (module.ends_with(e)) return false;
  }
  if (nvfp4) return !any_wildcard(ignore, module);
  static const Patterns none;
  const Patterns& p = patterns != nullptr ? *patterns : none;
  if (block_fp8) {
    // As transformers' should_convert_module (5.24): the entry as a pattern matched from the start up to a
    // module boundary ("layer.1" covers "layer.1.attn", not "layer.11.attn"; "mlp.gate" not "mlp.gate_proj"),
    // or the end of the name.
    for (const std::string& e : ignore) {
      if (module.ends_with(e)) return false;
    }
    return !any_regex_to_boundary(p.ignore, module);
  }
  return names(targets, p.targets, module) && !names(ignore, p.ignore, module);
}

int64_t WeightQuant::stored_bytes(const std::string& weight, int64_t out, int64_t in, int64_t dtype_bytes) const {
  if (!quantises(weight)) return out * in * dtype_bytes;
  if (block_fp8) {
    const int64_t scales = ceil_div_sat(out, block_rows) * ceil_div_sat(in, block_cols);
    return out * in + scales * 4;  // E4M3 values, fp32 scales
  }
  if (nvfp4) {
    // Packed E2M1 pairs, an E4M3 scale per group, and the F32 weight_scale_2 and input_scale scalars.
    return out * ceil_div_sat(in, 2) + out * ceil_div_sat(in, group_size) + 8;
  }
  // Packed int32 words and bf16 group scales (the int64 [2] weight_shape is metadata, not kept).
  return out * ceil_div_sat(in, 8) * 4 + out * ceil_div_sat(in, group_size) * 2;
}

WeightQuant read_quant(const ConfigJson& cfg) {
  WeightQuant quant;
  if (const std::optional<ConfigJson> q = cfg.child("quantization_config")) {
    quant.method = q->get_string("quant_method", "unknown");
    if (quant.method == "fp8" && q->has("weight_block_size")) {
      const std::vector<int64_t> block = q->get_int_list("weight_block_size");
      SY_CHECK(block.size() == 2 && block[0] > 0 && block[1] > 0,
               "{}: weight_block_size must be two positive integers, got {} values", q->source(), block.size());
      quant.block_fp8 = true;
      quant.block_rows = block[0];
      quant.block_cols = block[1];
      quant.ignore = q->get_string_list("modules_to_not_convert");
      for (std::string& e : q->get_string_list("ignored_layers")) quant.ignore.push_back(std::move(e));
    } else if (quant.method == "compressed-tensors") {
      read_compressed_tensors(*q, quant);
    } else if (quant.method == "modelopt") {
      read_modelopt(*q, quant);
    }
    quant.patterns = std::make_shared<const WeightQuant::Patterns>(WeightQuant::Patterns{
        .targets = compile(quant.targets, false, q->source(), "config_groups targets"),
        .ignore =
            compile(quant.nvfp4 ? std::vector<std::string>{} : quant.ignore, quant.block_fp8, q->source(), "ignore")});
  }
  return quant;
}

WeightQuant read_quant(const ConfigJson& cfg, const std::optional<ConfigJson>& hf_quant) {
  if (cfg.has("quantization_config") || !hf_quant) return read_quant(cfg);
  const std::optional<ConfigJson> q = hf_quant->child("quantization");
  SY_CHECK(q.has_value(),
           "{}: no \"quantization\" object; ModelOpt writes {{\"producer\": ..., \"quantization\": "
           "{{\"quant_algo\": ...}}}}",
           hf_quant->source());
  WeightQuant quant;
  read_modelopt(*q, quant);
  return quant;
}

}  // namespace sy
