// How a checkpoint's linear weights are quantised, from config.json's quantization_config (or ModelOpt's
// hf_quant_config.json): block-scaled FP8 (DeepSeek-V3, Kimi K2 base, Qwen3-*-FP8), compressed-tensors
// pack-quantized INT4 with group scales (Kimi K2 Thinking, K2.5, K2.6) and NVIDIA ModelOpt NVFP4 (GLM-5,
// DeepSeek-R1 FP4), with their ignore lists (../shared/quant-formats.md, A, B and C).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"

namespace sy {

struct WeightQuant {
  std::string method;  // quantization_config.quant_method; empty = unquantised
  // Block-scaled FP8: X.weight F8_E4M3 [out, in] with X.weight_scale_inv [ceil(out/rows), ceil(in/cols)].
  bool block_fp8 = false;
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  // compressed-tensors pack-quantized: X.weight_packed I32 [out, ceil(in/8)] of 4-bit values (offset 8,
  // element k in word k/8 at bits 4·(k%8)), X.weight_scale [out, ceil(in/group_size)], X.weight_shape I64 [2].
  bool int4_group = false;
  int64_t group_size = 0;
  // NVIDIA ModelOpt NVFP4: X.weight U8 [out, in/2] of E2M1 values (element 2j in the low nibble),
  // X.weight_scale F8_E4M3 [out, in/group_size], X.weight_scale_2 F32 (a scalar) and, where activations
  // were quantised too, X.input_scale F32 (a scalar, read and unused: the arithmetic is weight-only).
  bool nvfp4 = false;
  // ModelOpt's kv_cache_quant_algo ("FP8": the checkpoint holds k_scale / v_scale per attention layer).
  std::string kv_cache_quant;
  // The linear modules quantised: those matching `targets` (int4; "Linear" is every linear weight) and
  // matching no entry of `ignore` (FP8's modules_to_not_convert / ignored_layers, compressed-tensors'
  // ignore). compressed-tensors: an entry "re:P" is a regular expression matched from the start of the
  // module name, another entry a module name (or "Linear"). FP8, as transformers' should_convert_module
  // applies its lists: each entry is a pattern matched from the start, a parent module, or a name's end.
  // NVFP4: ModelOpt's exclude_modules, shell wildcards (fnmatch) over the module name.
  std::vector<std::string> targets;
  std::vector<std::string> ignore;
  // Modules whose names end with one of these count as unquantised whatever the lists say (the planner's
  // view of weights a backend widens at load).
  std::vector<std::string> unquantised_suffixes;

  // Whether the linear weight `weight` ("model.layers.3.mlp.experts.7.down_proj.weight") is stored quantised.
  bool quantises(const std::string& weight) const;
  // Checkpoint bytes of a linear weight [out, in] as it is stored (quantised or in `dtype_bytes` each).
  int64_t stored_bytes(const std::string& weight, int64_t out, int64_t in, int64_t dtype_bytes) const;

  struct Patterns;
  std::shared_ptr<const Patterns> patterns;  // the compiled "re:" entries of targets and ignore
};

// quantization_config of `cfg` (none: an empty WeightQuant). A form the engine cannot read (another FP8
// layout, other bit widths, asymmetric or activation-quantised compressed-tensors schemes) is recorded by
// method name only, and refused where its weights are read or sized. A malformed quantization_config is an
// error naming the key.
WeightQuant read_quant(const ConfigJson& cfg);
// As read_quant, for a folder: config.json's quantization_config, else ModelOpt's hf_quant_config.json
// beside it (`hf_quant`, parsed by the caller) when there is one.
WeightQuant read_quant(const ConfigJson& cfg, const std::optional<ConfigJson>& hf_quant);

}  // namespace sy
