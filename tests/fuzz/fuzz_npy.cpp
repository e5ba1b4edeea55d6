// libFuzzer: a .npy file as read_npy_f32 reads it (magic, version, header dict, shape, dtype, data size).
#include "base/check.h"
#include "fuzz_util.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = sy::fuzz::write_input("a.npy", data, size);
  try {
    const sy::NpyArray a = sy::read_npy_f32(path);
    volatile float sink = a.data.empty() ? 0.0f : a.data.back();
    (void)sink;
  } catch (const sy::Error&) {
  }
  return 0;
}
