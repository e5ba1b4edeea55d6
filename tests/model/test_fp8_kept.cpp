// The loader's block-FP8 path for a backend that keeps FP8 as stored (the CUDA backend does; the CPU
// backend dequantises, so a host double stands in here): every matrix of the bundled FP8 Qwen3-MoE fixture
// (blocks of 4 x 4) reaches the "device" as the checkpoint's own E4M3 bytes and block scales, cut to each
// layout's slice (tensor-parallel rows and columns, q/k/v and gate/up stacked, experts in an array), read
// straight from the safetensors tensors here; a part stored otherwise than the array it joins is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arch/model_desc.h"
#include "base/check.h"
#include "common/fixture.h"
#include "common/keeps_quant_host.h"
#include "io/safetensors.h"
#include "model/weights.h"

namespace sy {
namespace {

const std::string kLayer = "model.layers.1.";

class Fp8Kept : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fixtures_dir() / "qwen3_moe_fp8";
    desc_ = load_model_desc(dir_);
    ckpt_ = std::make_unique<Checkpoint>(Checkpoint::open(dir_));
    ASSERT_TRUE(desc_.quant.block_fp8);
    ASSERT_EQ(desc_.quant.block_rows, 4);
  }
  std::unique_ptr<WeightLoader> loader() {
    auto l = std::make_unique<WeightLoader>(ckpt_.get(), 0, host_, store_);
    l->set_quant(desc_.quant);
    return l;
  }
  // Rows [r0, r0 + rows) x columns [c0, c0 + cols) of the checkpoint's E4M3 tensor, and of its scales in
  // blocks (r0, c0, rows and cols whole blocks or running to the end).
  std::vector<uint8_t> bytes(const std::string& name, int64_t r0, int64_t rows, int64_t c0, int64_t cols) const {
    const TensorInfo* t = ckpt_->find(name);
    EXPECT_EQ(t->dtype, DType::f8_e4m3) << name;
    std::vector<uint8_t> out;
    const auto* q = reinterpret_cast<const uint8_t*>(t->data);
    for (int64_t r = r0; r < r0 + rows; ++r)
      out.insert(out.end(), q + r * t->shape[1] + c0, q + r * t->shape[1] + c0 + cols);
    return out;
  }
  std::vector<float> scales(const std::string& name, int64_t r0, int64_t rows, int64_t c0, int64_t cols) const {
    const TensorInfo* s = ckpt_->find(name + "_scale_inv");
    std::vector<float> all(static_cast<size_t>(s->shape.numel()));
    convert_to_f32(s->data, s->dtype, all.data(), all.size());
    const int64_t b = 4, g = s->shape[1];
    std::vector<float> out;
    for (int64_t r = r0 / b; r < (r0 + rows + b - 1) / b; ++r) {
      for (int64_t c = c0 / b; c < (c0 + cols + b - 1) / b; ++c) out.push_back(all[static_cast<size_t>(r * g + c)]);
    }
    return out;
  }
  static std::vector<uint8_t> held_bytes(const Matrix& m, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(m.w);
    return {p, p + n};
  }
  static std::vector<float> held_scales(const Matrix& m, int64_t rows, int64_t cols) {
    const int64_t n = (rows + m.q.block_rows - 1) / m.q.block_rows * ((cols + m.q.block_cols - 1) / m.q.block_cols);
    return {m.q.scales, m.q.scales + n};
  }

  test::KeepsQuantHost host_;
  WeightStore store_;
  std::filesystem::path dir_;
  ModelDesc desc_;
  std::unique_ptr<Checkpoint> ckpt_;
};

TEST_F(Fp8Kept, WholeAndSlicedMatricesAreTheStoredBytesAndScales) {
  auto l = loader();
  const int64_t H = desc_.hidden;  // 80; o_proj is [80, 120]
  const std::string o = kLayer + "self_attn.o_proj.weight";
  const Matrix whole = l->bind_matrix(o, {H, 120});
  ASSERT_EQ(whole.q.format, WeightFormat::fp8_block);
  EXPECT_EQ(held_bytes(whole, H * 120), bytes(o, 0, H, 0, 120));
  EXPECT_EQ(held_scales(whole, H, 120), scales(o, 0, H, 0, 120));
  EXPECT_EQ(whole.q.scale_cols, 30);
  // A tensor-parallel rank's columns 40..79 and, of another tensor, rows 40..79.
  auto l2 = loader();
  const Matrix cols = l2->bind_matrix(o, {H, 120}, {.dim = 1, .start = 40, .count = 40});
  EXPECT_EQ(held_bytes(cols, H * 40), bytes(o, 0, H, 40, 40));
  EXPECT_EQ(held_scales(cols, H, 40), scales(o, 0, H, 40, 40));
  const std::string q = kLayer + "self_attn.q_proj.weight";  // [120, 80]
  const Matrix rows = l2->bind_matrix(q, {120, H}, {.dim = 0, .start = 40, .count = 40});
  EXPECT_EQ(held_bytes(rows, 40 * H), bytes(q, 40, 40, 0, H));
  EXPECT_EQ(held_scales(rows, 40, H), scales(q, 40, 40, 0, H));
}

TEST_F(Fp8Kept, StackedPartsAndExpertArraysKeepEachPartsBlocks) {
  auto l = loader();
  const int64_t H = desc_.hidden, I = desc_.moe.inter;  // 80, 36
  const std::string e = kLayer + "mlp.experts.";
  const MatrixArray gu = l->allocate_matrices(e + "0.gate_proj.weight", {I, H}, 2, 2 * I, H, I);
  ASSERT_EQ(gu.first.q.format, WeightFormat::fp8_block);
  for (int64_t x = 0; x < 2; ++x) {
    l->load_matrix_into(e + std::to_string(x) + ".gate_proj.weight", {I, H}, gu, x, 0);
    l->load_matrix_into(e + std::to_string(x) + ".up_proj.weight", {I, H}, gu, x, I);
  }
  for (int64_t x = 0; x < 2; ++x) {
    const std::string gate = e + std::to_string(x) + ".gate_proj.weight",
                      up = e + std::to_string(x) + ".up_proj.weight";
    const Matrix g = l->matrix_at(gu, x, 0), u = l->matrix_at(gu, x, I);
    EXPECT_EQ(held_bytes(g, I * H), bytes(gate, 0, I, 0, H)) << x;
    EXPECT_EQ(held_bytes(u, I * H), bytes(up, 0, I, 0, H)) << x;
    EXPECT_EQ(held_scales(g, I, H), scales(gate, 0, I, 0, H)) << x;
    EXPECT_EQ(held_scales(u, I, H), scales(up, 0, I, 0, H)) << x;
  }
  // A slice of 18 rows cuts a block of 4: dense instead, whatever the backend keeps.
  EXPECT_TRUE(l->allocate_matrices(e + "2.gate_proj.weight", {I, H}, 1, 36, H, 18, {.dim = 0, .start = 0, .count = 18})
                  .first.q.dense());
}

TEST_F(Fp8Kept, APartStoredOtherwiseIsRefused) {
  auto l = loader();
  const int64_t H = desc_.hidden;
  // The router (gate.weight, F32 [8, 80]) loaded into an FP8 array made for an expert matrix of that shape.
  const MatrixArray a = l->allocate_matrices(kLayer + "self_attn.o_proj.weight", {H, 120}, 1, 8, H, 8);
  ASSERT_EQ(a.first.q.format, WeightFormat::fp8_block);
  try {
    l->load_matrix_into(kLayer + "mlp.gate.weight", {8, H}, a, 0, 0);
    FAIL() << "a non-FP8 part was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("mlp.gate.weight' has dtype"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("must be stored alike"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace sy
