// make_backend: the backend named on the command line ("cpu", "cuda", "cuda:N").
#include "backend/backend.h"
#include "base/check.h"
#include "base/input.h"

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

KvDType parse_kv_dtype(const std::string& name) {
  if (name == "auto") return KvDType::native;
  if (name == "bf16") return KvDType::bf16;
  if (name == "fp8") return KvDType::fp8;
  SY_FAIL(
      "--kv-dtype '{}' is not one of auto, bf16, fp8 (fp8: FP8 E4M3 with per-tensor scales from the checkpoint, "
      "else 1.0; auto: the device's own type)",
      cut_for_message(name));
}

std::unique_ptr<Backend> make_backend(const std::string& name, KvDType kv) {
  if (name == "cpu") return make_cpu_backend(false, kv);
  if (name == "cpu-bf16") return make_cpu_backend(true, kv);
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
    return make_cuda_backend(device, kv);
#else
    SY_FAIL("device '{}': this build has no CUDA backend; rebuild with -DSY_WITH_CUDA=ON or use --device cpu", name);
#endif
  }
  SY_FAIL("unknown device '{}'; use cpu, cpu-bf16, cuda or cuda:N", name);
}

}  // namespace sy
