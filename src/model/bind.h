// The model a description asks for, built from the shared blocks with this rank's share of its weights.
#pragma once

#include <memory>

#include "arch/model_desc.h"
#include "model/model.h"
#include "model/weights.h"

namespace sy {

// Binds every weight of the rank's layers (loader.plan() is fixed here from the layout and the layers kept)
// and, unless store.checks_only, builds the model. Every checkpoint tensor must be bound or skipped.
std::unique_ptr<Model> build_model(const ModelDesc& desc, const LoadOptions& options, WeightLoader& loader,
                                   WeightStore& store, Backend& backend);

}  // namespace sy
