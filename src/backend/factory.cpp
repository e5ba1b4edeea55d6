// make_backend: the backend named on the command line ("cpu", "cuda", "cuda:N").
#include "backend/backend.h"
#include "base/check.h"

#ifdef SY_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace sy {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::attention:
      return "attention";
    case Phase::router:
      return "router";
    case Phase::experts:
      return "expert GEMMs";
    case Phase::combine:
      return "combine";
    case Phase::dense:
      return "dense GEMMs";
    case Phase::norms:
      return "norms";
    case Phase::communication:
      return "communication";
    case Phase::sampling:
      return "sampling";
    case Phase::other:
      return "other";
  }
  return "?";
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cpu-bf16") return make_cpu_backend(true);
  if (name == "cuda" || name.rfind("cuda:", 0) == 0) {
#ifdef SY_WITH_CUDA
    int device = 0;
    if (name.size() > 5) {
      size_t used = 0;
      try {
        device = std::stoi(name.substr(5), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      SY_CHECK(used == name.size() - 5 && device >= 0, "device '{}' is not cuda:N with N a GPU index", name);
    }
    return make_cuda_backend(device);
#else
    SY_FAIL("device '{}': this build has no CUDA backend; rebuild with -DSY_WITH_CUDA=ON or use --device cpu", name);
#endif
  }
  SY_FAIL("unknown device '{}'; use cpu, cpu-bf16, cuda or cuda:N", name);
}

}  // namespace sy
