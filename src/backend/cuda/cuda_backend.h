// The CUDA backend (built with SY_WITH_CUDA): one GPU, one stream.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace sy {

std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace sy
