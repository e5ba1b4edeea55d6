// Builders of the architectures in this folder, one file each; the table in model/registry.cpp maps
// Hugging Face class names to them.
#pragma once

#include <memory>

#include "io/model_config.h"
#include "model/model.h"
#include "model/weights.h"

namespace sy {

using ArchBuilder = std::unique_ptr<Model> (*)(const ConfigJson& config, const LoadOptions& options,
                                               WeightLoader& loader, WeightStore& store, Backend& backend);

std::unique_ptr<Model> build_qwen3_moe(const ConfigJson&, const LoadOptions&, WeightLoader&, WeightStore&, Backend&);
std::unique_ptr<Model> build_mixtral(const ConfigJson&, const LoadOptions&, WeightLoader&, WeightStore&, Backend&);
std::unique_ptr<Model> build_deepseek_v3(const ConfigJson&, const LoadOptions&, WeightLoader&, WeightStore&, Backend&);
std::unique_ptr<Model> build_deepseek_v32(const ConfigJson&, const LoadOptions&, WeightLoader&, WeightStore&,
                                          Backend&);
std::unique_ptr<Model> build_glm4_moe(const ConfigJson&, const LoadOptions&, WeightLoader&, WeightStore&, Backend&);
std::unique_ptr<Model> build_glm_moe_dsa(const ConfigJson&, const LoadOptions&, WeightLoader&, WeightStore&,
                                         Backend&);

}  // namespace sy
