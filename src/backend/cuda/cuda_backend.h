// The CUDA backend (built with SY_WITH_CUDA): one GPU, one stream.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace sy {

// kv: the KV cache's type (native: bf16).
std::unique_ptr<Backend> make_cuda_backend(int device, KvDType kv = KvDType::native);

}  // namespace sy
