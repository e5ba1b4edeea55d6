// libFuzzer: model.safetensors.index.json beside two valid shards, as Checkpoint::open reads a sharded
// folder (weight_map entries naming missing files, tensors, paths outside the folder, duplicates).
#include <vector>

#include "base/check.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

namespace {

void write_shards() {
  static bool written = false;
  if (written) return;
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  sy::write_safetensors(sy::fuzz::scratch_dir() / "model-00001-of-00002.safetensors",
                        {{"x.weight", sy::DType::f32, sy::Shape{2, 2}, a.data()}});
  sy::write_safetensors(sy::fuzz::scratch_dir() / "model-00002-of-00002.safetensors",
                        {{"y.weight", sy::DType::f32, sy::Shape{2}, b.data()}});
  written = true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_shards();
  sy::fuzz::write_input("model.safetensors.index.json", data, size);
  try {
    const sy::Checkpoint ck = sy::Checkpoint::open(sy::fuzz::scratch_dir());
    volatile size_t sink = ck.total_bytes();
    (void)sink;
  } catch (const sy::Error&) {
  }
  return 0;
}
