// Binds model weights by their checkpoint names: each tensor is declared once with its shape, read
// from the checkpoint (dtype and shape checked, converted to fp32 on the device) or drawn from a
// seeded generator, and at the end every checkpoint tensor must have been used exactly once. Weights
// are stored in the backend's weight dtype (fp32 on the CPU, bf16 on the GPU); quantised linear weights
// (block FP8, INT4, NVFP4) are kept as stored where the backend computes with that form (bind_matrix),
// else dequantised at load with their scales.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "arch/quant.h"
#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/parallel.h"

namespace sy {

enum class WeightInit : uint8_t {
  normal,  // random weights: N(0, stddev)
  ones,    // random weights: norm scales
  zeros,   // random weights: biases
};

// A part of a checkpoint tensor: `count` entries from `start` along dimension `dim` (0 or 1), as a rank
// of a parallel layout holds it; count 0 means the whole tensor.
struct Slice {
  int dim = 0;
  int64_t start = 0;
  int64_t count = 0;
  bool whole() const { return count == 0; }
};

// Device memory of a model's weights; lives as long as the model.
struct WeightStore {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  size_t bytes = 0;
  // Checkpoint bytes bound (this rank's slices, in the checkpoint's dtypes), dry runs included: what the
  // planner predicts a rank holds.
  size_t checkpoint_bytes = 0;
  // A dry run (check_model): every name, shape and dtype is checked, nothing is allocated or read, and
  // the pointers handed out are placeholders that must not be dereferenced.
  bool checks_only = false;
};

// Room for `count` weight matrices of [rows, cols] each (experts; parts such as gate and up stacked in one
// matrix), in the form the backend computes with: dense in its weight dtype, or block FP8 as stored.
struct MatrixArray {
  Matrix first;  // matrix 0
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t count = 0;
};

class WeightLoader {
 public:
  // checkpoint == nullptr: random weights drawn from `seed`. groups: the layout this rank loads its share
  // of (null: one rank, everything).
  WeightLoader(const Checkpoint* checkpoint, uint64_t seed, Backend& backend, WeightStore& store,
               const ParallelGroups* groups = nullptr);

  // Allocates device memory for the tensor and fills it. Returns the device pointer.
  WeightPtr bind(const std::string& name, const Shape& shape, WeightInit init = WeightInit::normal,
                 const Slice& slice = {});
  // Fills `dst` (shape.numel() elements of device memory, or the slice's), e.g. one expert's part of a
  // fused tensor. `shape` is always the checkpoint tensor's whole shape; only the slice's bytes are read
  // (the checkpoint is memory-mapped). Random weights of a slice are drawn for that slice alone.
  void load_into(const std::string& name, const Shape& shape, void* dst, WeightInit init = WeightInit::normal,
                 const Slice& slice = {});
  // A linear weight [out, in] (its slice), in the form the backend computes with: block FP8, INT4 or NVFP4
  // as stored when the checkpoint's tensor is stored so (random weights: when the quantization config
  // quantises it; INT4 with BF16 group scales), the slice cuts no block or group, and the backend keeps
  // that form for this shape, else dequantised to the backend's weight dtype.
  Matrix bind_matrix(const std::string& name, const Shape& shape, const Slice& slice = {});
  // Room for `count` matrices of [rows, cols] filled by load_matrix_into, parts of `part_rows` rows (or
  // one part of all rows); their form is decided by `probe` (the first tensor loaded, of checkpoint shape
  // `probe_shape`, cut by `slice` as every part is): the stored form as bind_matrix keeps it when every
  // part starts on a block row (FP8) and the slice cuts no block or group, else dense.
  // keep_quantised false: dense whatever the checkpoint and backend allow.
  MatrixArray allocate_matrices(const std::string& probe, const Shape& probe_shape, int64_t count, int64_t rows,
                                int64_t cols, int64_t part_rows, const Slice& slice = {}, bool keep_quantised = true);
  // The form allocate_matrices gives such matrices (dense, or the quantised form kept as stored).
  WeightFormat kept_format(const std::string& probe, const Shape& probe_shape, int64_t rows, int64_t cols,
                           int64_t part_rows, const Slice& slice = {}) const;
  // Loads the linear weight `name` (checkpoint shape `shape`, cut by `slice`) into matrix `index` of `dst`
  // from row `row0` on. Every part of a quantised array must be stored in its form in the checkpoint.
  void load_matrix_into(const std::string& name, const Shape& shape, const MatrixArray& dst, int64_t index,
                        int64_t row0, const Slice& slice = {});
  // Matrix `index` of `a` from row `row0` on (a part of a stacked matrix, or one expert).
  Matrix matrix_at(const MatrixArray& a, int64_t index, int64_t row0 = 0) const;
  // As bind, but stored as fp32 whatever the backend's weight dtype (routers).
  const float* bind_f32(const std::string& name, const Shape& shape);
  // Allocates device memory of `numel` elements without filling it (for fused tensors).
  void* allocate(int64_t numel);
  // Sets `numel` elements of weight memory to zero (e.g. the padding row of a vocabulary share).
  void zero(void* dst, int64_t numel);
  // Element i of an array allocated here.
  void* at(void* base, int64_t i) const;
  // Tensors under this name prefix are deliberately not used (e.g. layers cut by --layers).
  void skip_prefix(const std::string& prefix);
  // How the checkpoint's linear weights are quantised (quantization_config). Block-scaled FP8: an F8_E4M3
  // tensor X.weight [out, in] is read as float(q[i, j]) * X.weight_scale_inv[i / rows, j / cols], the
  // scales ([ceil(out / rows), ceil(in / cols)], F32 or BF16) bound with it. INT4 (compressed-tensors
  // pack-quantized): a weight X.weight that quant.quantises() is read from X.weight_packed, X.weight_scale
  // and X.weight_shape (model/weights_int4.cpp). NVFP4 (ModelOpt): a U8 X.weight with X.weight_scale,
  // X.weight_scale_2 and X.input_scale (model/weights_nvfp4.cpp). FP8 KV-cache scales are model/kv_scales.h's.
  // Each reaches the device as stored where bind_matrix keeps it, dequantised otherwise.
  void set_quant(const WeightQuant& quant);
  bool has(const std::string& name) const;
  // The checkpoint's tensor `name`, counted as used, or null when it has none (always null for random weights):
  // for tensors read on the host, such as the FP8 KV-cache scales (model/kv_scales.h).
  const TensorInfo* take(const std::string& name);
  // The checkpoint folder, for messages ("random weights" without one).
  std::string source() const;
  // Throws if a checkpoint tensor was neither bound nor skipped.
  void finish();

  bool random() const { return checkpoint_ == nullptr; }
  // This rank's share of the model; set by layers_to_build once the number of layers is known.
  const ShardPlan& plan() const { return plan_; }
  const ParallelGroups* groups() const { return groups_; }
  void set_plan(const ShardPlan& plan) { plan_ = plan; }

 private:
  void fill(const std::string& name, const Shape& shape, void* dst, WeightInit init, DType target, const Slice& slice);
  void upload_staging(void* dst, size_t n, DType target);  // staging_ (fp32) → dst in `target`
  void* allocate_bytes(size_t bytes);
  // The checkpoint's tensor `name`, which must have `shape` and a dtype this loader converts (for FP8, with
  // a scale tensor of the block grid's shape); for an INT4 weight, its X.weight_packed (check_int4).
  const TensorInfo* check_tensor(const std::string& name, const Shape& shape) const;
  // The block scales of the FP8 weight `t`, checked against it.
  const TensorInfo* check_fp8_scales(const TensorInfo& t) const;
  void fill_fp8(const TensorInfo& t, void* dst, DType target, const Slice& slice);
  // The INT4 weight `name` [out, in]: its packed words `packed`, group scales and shape checked against it
  // and the config; returns &packed.
  const TensorInfo* check_int4(const std::string& name, const Shape& shape, const TensorInfo& packed) const;
  // The INT4 weight `name` [out, in] from its packed words `packed` (check_int4's), dequantised.
  void fill_int4(const std::string& name, const Shape& shape, const TensorInfo& packed, void* dst, DType target,
                 const Slice& slice);
  // The NVFP4 weight `name` [out, in] stored as `packed` (U8 [out, in/2]): its scales checked against it
  // and the config; returns &packed.
  const TensorInfo* check_nvfp4(const std::string& name, const Shape& shape, const TensorInfo& packed) const;
  void fill_nvfp4(const std::string& name, const Shape& shape, const TensorInfo& packed, void* dst, DType target,
                  const Slice& slice);
  // Whether the tensor `name` of checkpoint shape `shape`, cut by `slice`, into matrices of [rows, cols]
  // in parts of `part_rows` rows, stays block FP8 on the device (allocate_matrices).
  bool keeps_fp8(const std::string& name, const Shape& shape, int64_t rows, int64_t cols, int64_t part_rows,
                 const Slice& slice) const;
  // The 4-bit form (int4_group or nvfp4) the tensor `name` of checkpoint shape `shape`, cut by `slice` into
  // matrices of [rows, cols], keeps on the device, or dense (weights_q4.cpp).
  WeightFormat keeps_q4(const std::string& name, const Shape& shape, int64_t rows, int64_t cols,
                        const Slice& slice) const;
  MatrixArray allocate_q4(WeightFormat format, int64_t count, int64_t rows, int64_t cols);
  Matrix q4_matrix_at(const MatrixArray& a, int64_t index, int64_t row0) const;
  // load_matrix_into for a 4-bit array: the packed bytes, group scales and per-tensor scale of the slice.
  void load_q4_matrix(const std::string& name, const Shape& shape, const MatrixArray& dst, int64_t index, int64_t row0,
                      const Slice& slice);
  // load_matrix_into for a block-FP8 array: the E4M3 bytes and the scales of the slice, as stored.
  void load_fp8_matrix(const std::string& name, const Shape& shape, const MatrixArray& dst, int64_t index, int64_t row0,
                       const Slice& slice);
  // Rows [row0, row0 + rows) x columns [col0, col0 + cols) of the FP8 weight `t`, dequantised into staging_.
  void dequantise_fp8(const TensorInfo& t, const TensorInfo& scales, int64_t row0, int64_t rows, int64_t col0,
                      int64_t cols);
  const Checkpoint* checkpoint_;
  const ParallelGroups* groups_;
  ShardPlan plan_;
  uint64_t seed_;
  Backend& backend_;
  WeightStore& store_;
  std::set<std::string> used_;
  std::vector<std::string> skipped_prefixes_;
  std::vector<float> staging_;
  std::vector<uint16_t> staging16_;
  std::vector<float> scale_staging_;
  std::vector<uint8_t> byte_staging_;
  WeightQuant quant_;
  // Loading progress on a terminal (rank 0, checkpoint weights): bytes read of the checkpoint's total.
  void show_progress(size_t bytes);
  bool progress_on_ = false;
  size_t progress_done_ = 0;
  size_t progress_total_ = 0;
  int progress_shown_ = -1;  // percent last drawn
};

// INT4 (compressed-tensors): the packed tensor of the weight `weight` (X.weight → X.weight_packed; other
// names map to a name no tensor has).
std::string int4_packed_name(const std::string& weight);
// The module of a linear weight: "X" of "X.weight". Precondition: the name ends with ".weight".
std::string linear_module(const std::string& weight);

// Random weights: dense ones are N(0, kRandomWeightStddev), quantised ones drawn to that RMS.
inline constexpr float kRandomWeightStddev = 0.02f;
// The seed of the random values of weight `name` cut to `slice`, in the form `form` ("" dense, "#fp8", "#q4"):
// a slice draws its own values (a sharded random model is not the unsharded one cut up).
uint64_t weight_seed(uint64_t seed, const std::string& name, const Slice& slice, std::string_view form = "");

}  // namespace sy
