// The loader's 4-bit path for a backend that keeps INT4 and NVFP4 as stored (the CUDA backend does, and cpu-bf16
// where the GPU does; the plain CPU backend dequantises, so a host double stands in here), on the bundled INT4
// (Kimi K2's ignore list) and NVFP4 (GLM-5) fixtures: expert and attention matrices reach the "device" as the
// checkpoint's own packed bytes, group scales and per-tensor scales, cut to a rank's rows or columns; decoded by the
// formats' definitions (../shared/quant-formats.md B and C, written out here), they equal what the CPU backend's
// dequantising loader holds; a cut through a group is not kept (and refused), and a part stored otherwise
// than the array it joins is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arch/model_desc.h"
#include "base/check.h"
#include "base/dtype.h"
#include "common/fixture.h"
#include "common/fixture_run.h"
#include "common/keeps_quant_host.h"
#include "common/quant_checkpoint.h"
#include "io/safetensors.h"
#include "model/blocks/ffn.h"
#include "model/weights.h"
#include "runtime/engine.h"

namespace sy {
namespace {

// E2M1 codes: bit 3 the sign, bits 0-2 index the magnitudes.
constexpr std::array<float, 8> kE2m1 = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// cpu-bf16 against transformers in fp32 on glm_moe_dsa_nvfp4_g16, a fixture made stable under bf16 weights (no
// router or indexer choice changes): bf16 rounding moves its logits by about 1e-2 of a row's largest (1.16e-2
// measured here, as the GPU measured on the H200); a wrongly decoded matrix moves them by far more.
constexpr double kBf16Tolerance = 3e-2;

class Q4Kept : public ::testing::Test {
 protected:
  void open(const std::string& fixture) { open_dir(test::fixtures_dir() / fixture); }
  void open_dir(const std::filesystem::path& dir) {
    dir_ = dir;
    desc_ = load_model_desc(dir_);
    ckpt_ = std::make_unique<Checkpoint>(Checkpoint::open(dir_));
  }
  std::unique_ptr<WeightLoader> loader(Backend& be, WeightStore& store) {
    auto l = std::make_unique<WeightLoader>(ckpt_.get(), 0, be, store);
    l->set_quant(desc_.quant);
    return l;
  }
  // Row-major [rows, cols] of a held 4-bit matrix decoded by the format's definition.
  std::vector<float> decode(const Matrix& m, int64_t rows, int64_t cols) const {
    std::vector<float> w(static_cast<size_t>(rows * cols));
    const auto* b = static_cast<const uint8_t*>(m.w);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t nib = (b[r * cols / 2 + c / 2] >> (4 * (c % 2))) & 0xF;
        const int64_t g = r * m.q.scale_cols + c / m.q.block_cols;
        float v = 0.0f;
        if (m.q.format == WeightFormat::int4_group) {
          uint16_t s = 0;
          std::memcpy(&s, static_cast<const uint8_t*>(m.q.group_scales) + 2 * g, 2);
          v = static_cast<float>(static_cast<int>(nib) - 8) * bf16_to_f32(s);
        } else {
          const uint8_t s = static_cast<const uint8_t*>(m.q.group_scales)[g];
          v = (nib & 8 ? -kE2m1[nib & 7] : kE2m1[nib & 7]) * (f8_e4m3_to_f32(s) * m.q.row_scales[r]);
        }
        w[static_cast<size_t>(r * cols + c)] = v;
      }
    }
    return w;
  }
  // The same weight (cut as `slice`) as the CPU backend holds it: dequantised at load.
  std::vector<float> dequantised(const std::string& name, const Shape& shape, const Slice& slice = {}) {
    WeightStore store;
    auto cpu = make_cpu_backend();
    const Matrix m = loader(*cpu, store)->bind_matrix(name, shape, slice);
    EXPECT_TRUE(m.q.dense());
    const int64_t n = slice.whole() ? shape.numel() : shape.numel() / shape[slice.dim] * slice.count;
    const auto* p = static_cast<const float*>(m.w);
    return {p, p + n};
  }

  test::KeepsQuantHost host_;
  WeightStore store_;
  std::filesystem::path dir_;
  ModelDesc desc_;
  std::unique_ptr<Checkpoint> ckpt_;
};

TEST_F(Q4Kept, Int4ExpertsAreTheStoredBytesAndScales) {
  open("deepseek_v3_kimi_int4");
  ASSERT_TRUE(desc_.quant.int4_group);
  ASSERT_EQ(desc_.quant.group_size, 4);
  auto l = loader(host_, store_);
  const int64_t H = desc_.hidden, I = desc_.moe.inter;  // 64, 20
  const std::string e = "model.layers.2.mlp.experts.";
  const MatrixArray gu = l->allocate_matrices(e + "0.gate_proj.weight", {I, H}, 2, 2 * I, H, I);
  ASSERT_EQ(gu.first.q.format, WeightFormat::int4_group);
  EXPECT_EQ(gu.first.q.block_cols, 4);
  EXPECT_EQ(gu.first.q.scale_stride, 2 * I * H / 4);
  // Down's stored rows are padded to whole 32-bit words (20 values in 3 words); the device's are not.
  const MatrixArray dn = l->allocate_matrices(e + "0.down_proj.weight", {H, I}, 2, H, I, H);
  ASSERT_EQ(dn.first.q.format, WeightFormat::int4_group);
  for (int64_t x = 0; x < 2; ++x) {
    const std::string p = e + std::to_string(4 * x) + ".";  // experts 0 and 4
    l->load_matrix_into(p + "gate_proj.weight", {I, H}, gu, x, 0);
    l->load_matrix_into(p + "up_proj.weight", {I, H}, gu, x, I);
    l->load_matrix_into(p + "down_proj.weight", {H, I}, dn, x, 0);
  }
  for (int64_t x = 0; x < 2; ++x) {
    const std::string p = e + std::to_string(4 * x) + ".";
    EXPECT_EQ(decode(l->matrix_at(gu, x, 0), I, H), dequantised(p + "gate_proj.weight", {I, H})) << x;
    EXPECT_EQ(decode(l->matrix_at(gu, x, I), I, H), dequantised(p + "up_proj.weight", {I, H})) << x;
    EXPECT_EQ(decode(l->matrix_at(dn, x, 0), H, I), dequantised(p + "down_proj.weight", {H, I})) << x;
  }
  // The stored bytes themselves: expert 0's gate, row 3, is the packed words' bytes.
  const TensorInfo* packed = ckpt_->find(e + "0.gate_proj.weight_packed");
  ASSERT_NE(packed, nullptr);
  const auto* held = static_cast<const uint8_t*>(l->matrix_at(gu, 0, 0).w) + 3 * H / 2;
  EXPECT_EQ(std::memcmp(held, packed->data + 3 * packed->shape[1] * 4, static_cast<size_t>(H / 2)), 0);
}

TEST_F(Q4Kept, Int4SlicesKeepWholeGroupsAndIgnoredWeightsStayDense) {
  open("deepseek_v3_kimi_int4");
  auto l = loader(host_, store_);
  const int64_t H = desc_.hidden, I = desc_.moe.inter;
  const std::string p = "model.layers.2.mlp.experts.5.";
  // An expert-TP rank's rows 8..15 of gate, and columns 8..15 of down (two whole groups from byte 4).
  const Slice rows{.dim = 0, .start = 8, .count = 8}, cols{.dim = 1, .start = 8, .count = 8};
  const Matrix g = l->bind_matrix(p + "gate_proj.weight", {I, H}, rows);
  ASSERT_EQ(g.q.format, WeightFormat::int4_group);
  EXPECT_EQ(decode(g, 8, H), dequantised(p + "gate_proj.weight", {I, H}, rows));
  const Matrix d = l->bind_matrix(p + "down_proj.weight", {H, I}, cols);
  ASSERT_EQ(d.q.format, WeightFormat::int4_group);
  EXPECT_EQ(decode(d, H, 8), dequantised(p + "down_proj.weight", {H, I}, cols));
  // Columns 0..9 cut a group of 4: not kept, whatever the backend keeps, and refused by the dequantising
  // path with the rule the planner checks before loading.
  try {
    l->bind_matrix(p + "up_proj.weight", {I, H}, {.dim = 1, .start = 0, .count = 10});
    FAIL() << "a slice through an INT4 group was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("cuts an INT4 group of 4"), std::string::npos) << err.what();
  }
  // Kimi's ignore list keeps shared experts and attention in the model dtype.
  EXPECT_TRUE(l->bind_matrix("model.layers.2.mlp.shared_experts.down_proj.weight", {H, 40}).q.dense());
  EXPECT_TRUE(l->bind_matrix("model.layers.2.self_attn.q_proj.weight", {80, H}).q.dense());
}

TEST_F(Q4Kept, Nvfp4MatricesKeepEachPartsTensorScale) {
  open("glm_moe_dsa_nvfp4");
  ASSERT_TRUE(desc_.quant.nvfp4);
  auto l = loader(host_, store_);
  const int64_t H = desc_.hidden, I = desc_.moe.inter;  // 64, 20
  const std::string p = "model.layers.1.mlp.experts.6.";
  const MatrixArray gu = l->allocate_matrices(p + "gate_proj.weight", {I, H}, 1, 2 * I, H, I);
  ASSERT_EQ(gu.first.q.format, WeightFormat::nvfp4);
  l->load_matrix_into(p + "gate_proj.weight", {I, H}, gu, 0, 0);
  l->load_matrix_into(p + "up_proj.weight", {I, H}, gu, 0, I);
  const Matrix gate = l->matrix_at(gu, 0, 0), up = l->matrix_at(gu, 0, I);
  EXPECT_EQ(decode(gate, I, H), dequantised(p + "gate_proj.weight", {I, H}));
  EXPECT_EQ(decode(up, I, H), dequantised(p + "up_proj.weight", {I, H}));
  float scale2 = 0.0f;
  std::memcpy(&scale2, ckpt_->find(p + "up_proj.weight_scale_2")->data, 4);
  EXPECT_EQ(up.q.row_scales[0], scale2);
  EXPECT_EQ(up.q.row_scales[I - 1], scale2);
  // o_proj [64, 80]: a tensor-parallel rank's columns 40..79, held as the stored bytes.
  const std::string o = "model.layers.1.self_attn.o_proj.weight";
  const Slice half{.dim = 1, .start = 40, .count = 40};
  const Matrix om = l->bind_matrix(o, {H, 80}, half);
  ASSERT_EQ(om.q.format, WeightFormat::nvfp4);
  EXPECT_EQ(decode(om, H, 40), dequantised(o, {H, 80}, half));
  const TensorInfo* t = ckpt_->find(o);
  EXPECT_EQ(std::memcmp(om.w, t->data + 20, 20), 0);  // row 0's bytes 20..39
}

// The expert kernels take gate_up and down in one form: where a backend keeps only gate_up's rows (64 columns,
// not down's 20), both stay dense; where it keeps both, both are INT4.
TEST_F(Q4Kept, ExpertArraysKeepOneFormForGateUpAndDown) {
  open("deepseek_v3_kimi_int4");
  const MoeConfig c = moe_config(desc_);
  host_.cols_multiple = 32;
  const MoeWeights mixed = bind_moe(*loader(host_, store_), "model.layers.2.mlp.", kProjMlpNames, c);
  EXPECT_TRUE(mixed.gate_up.q.dense());
  EXPECT_TRUE(mixed.down.q.dense());
  host_.cols_multiple = 1;
  WeightStore store;
  const MoeWeights kept = bind_moe(*loader(host_, store), "model.layers.2.mlp.", kProjMlpNames, c);
  EXPECT_EQ(kept.gate_up.q.format, WeightFormat::int4_group);
  EXPECT_EQ(kept.down.q.format, WeightFormat::int4_group);
}

// deepseek_v3_kimi_int4_g32 is the fixture whose routed experts the GPU keeps as stored (rows of 64 and 32
// values, groups of 32), so that the cuda tier's conformance runs the 4-bit expert kernels on it.
TEST_F(Q4Kept, TheGroupOf32FixtureKeepsItsExpertsUnderTheGpuRule) {
  open("deepseek_v3_kimi_int4_g32");
  host_.cols_multiple = 32;
  for (const char* layer : {"model.layers.2.mlp.", "model.layers.3.mlp."}) {
    WeightStore store;
    const MoeWeights w = bind_moe(*loader(host_, store), layer, kProjMlpNames, moe_config(desc_));
    EXPECT_EQ(w.gate_up.q.format, WeightFormat::int4_group) << layer;
    EXPECT_EQ(w.down.q.format, WeightFormat::int4_group) << layer;
    EXPECT_EQ(w.gate_up.q.block_cols, 32) << layer;
  }
}

// glm_moe_dsa_nvfp4_g16 is the NVFP4 fixture the GPU keeps as stored: the published groups of 16, and every
// quantised matrix a multiple of 32 columns (the CUDA backend's 4-bit rule in keeps_quantised; o_proj reads 4
// heads of 24, the dense MLP 64 and 96, the experts 64 and 32), so that the cuda tier's conformance runs the
// NVFP4 kernels on it end to end (glm_moe_dsa_nvfp4, groups of 4 and experts of 20, is dequantised at load there).
TEST_F(Q4Kept, TheGroupOf16Nvfp4FixtureKeepsEveryMatrixUnderTheGpuRule) {
  open("glm_moe_dsa_nvfp4_g16");
  ASSERT_TRUE(desc_.quant.nvfp4);
  ASSERT_EQ(desc_.quant.group_size, 16);
  int64_t stored = 0;
  for (const TensorInfo* t : ckpt_->tensors()) {
    if (t->dtype != DType::u8) continue;
    const TensorInfo* scale = ckpt_->find(t->name + "_scale");
    ASSERT_NE(scale, nullptr) << t->name;
    const int64_t cols = 2 * t->shape[1];
    EXPECT_EQ(cols % 32, 0) << t->name << " has " << cols << " columns";
    EXPECT_EQ(cols, 16 * scale->shape[1]) << t->name;
    ++stored;
  }
  EXPECT_EQ(stored, 88);  // per layer o_proj; layer 0's dense MLP; layers 1-3's shared and 8 routed experts
  host_.cols_multiple = 32;
  const auto expect_kept = [](const QuantView& q, const std::string& what) {
    EXPECT_EQ(q.format, WeightFormat::nvfp4) << what;
    EXPECT_EQ(q.block_rows, 1) << what;
    EXPECT_EQ(q.block_cols, 16) << what;
  };
  const int64_t H = desc_.hidden, O = desc_.attn.n_heads * desc_.attn.v_head_dim, I = desc_.moe.inter;
  ASSERT_EQ(O, 96);
  ASSERT_EQ(I, 32);
  auto l = loader(host_, store_);
  for (int layer = 0; layer < 4; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    expect_kept(l->bind_matrix(p + "self_attn.o_proj.weight", {H, O}).q, p + "self_attn.o_proj");
    const std::string mlp = p + (layer == 0 ? "mlp." : "mlp.shared_experts.");
    const int64_t inter = layer == 0 ? desc_.dense_inter : desc_.moe.shared_inter;
    expect_kept(l->bind_matrix(mlp + "gate_proj.weight", {inter, H}).q, mlp + "gate_proj");
    expect_kept(l->bind_matrix(mlp + "up_proj.weight", {inter, H}).q, mlp + "up_proj");
    expect_kept(l->bind_matrix(mlp + "down_proj.weight", {H, inter}).q, mlp + "down_proj");
    if (layer == 0) continue;
    WeightStore store;
    const MoeWeights w = bind_moe(*loader(host_, store), p + "mlp.", kProjMlpNames, moe_config(desc_));
    expect_kept(w.gate_up.q, p + "mlp.experts gate_up");
    expect_kept(w.down.q, p + "mlp.experts down");
  }
}

// cpu-bf16, the cuda tier's oracle, keeps what the GPU keeps, as the same bytes and scales: the group-16 NVFP4
// and group-32 INT4 fixtures' matrices, not the group-4 NVFP4 fixture's.
TEST_F(Q4Kept, CpuBf16KeepsWhatTheGpuKeeps) {
  const auto oracle = make_cpu_backend(true);
  open("glm_moe_dsa_nvfp4_g16");
  const int64_t H = desc_.hidden;
  {
    WeightStore store;
    auto l = loader(*oracle, store);
    const std::string o = "model.layers.1.self_attn.o_proj.weight";
    const Matrix om = l->bind_matrix(o, {H, 96});
    ASSERT_EQ(om.q.format, WeightFormat::nvfp4);
    EXPECT_EQ(decode(om, H, 96), dequantised(o, {H, 96}));
    const MoeWeights w = bind_moe(*l, "model.layers.1.mlp.", kProjMlpNames, moe_config(desc_));
    EXPECT_EQ(w.gate_up.q.format, WeightFormat::nvfp4);
    EXPECT_EQ(w.down.q.format, WeightFormat::nvfp4);
    EXPECT_EQ(w.shared.down.q.format, WeightFormat::nvfp4);
  }
  open("deepseek_v3_kimi_int4_g32");
  {
    WeightStore store;
    const MoeWeights w = bind_moe(*loader(*oracle, store), "model.layers.2.mlp.", kProjMlpNames, moe_config(desc_));
    EXPECT_EQ(w.gate_up.q.format, WeightFormat::int4_group);
    EXPECT_EQ(w.down.q.format, WeightFormat::int4_group);
  }
  open("glm_moe_dsa_nvfp4");
  {
    WeightStore store;
    EXPECT_TRUE(loader(*oracle, store)->bind_matrix("model.layers.1.self_attn.o_proj.weight", {H, 80}).q.dense());
  }
}

// cpu-bf16 runs the NVFP4 fixture whose matrices it keeps 4-bit end to end, batched and chunked as the cuda tier's
// conformance runs it: transformers' greedy tokens, and logits within kBf16Tolerance of its fp32 ones. (The group-32
// INT4 fixture was not made bf16-stable: with bf16 rounding its greedy path leaves transformers', on the GPU too.)
TEST(Q4KeptModel, CpuBf16RunsTheGroupOf16Nvfp4Fixture) {
  const test::Fixture f = test::load_fixture("glm_moe_dsa_nvfp4_g16");
  const auto backend = make_cpu_backend(true);
  const auto model = load_model({.dir = f.dir}, *backend);
  EXPECT_LT(model->info().weight_bytes, load_model({.dir = f.dir}, *make_cpu_backend())->info().weight_bytes);
  const std::vector<RequestResult> results = test::run_fixture_prompts(f, *model, *backend);
  const int64_t vocab = f.greedy_logits.shape[1];
  double worst = 0.0;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    const RequestResult& r = results[i];
    const auto len = static_cast<int64_t>(f.prompts[i].size());
    ASSERT_GE(static_cast<int64_t>(r.logits.size()), len * vocab);
    worst = std::max(worst, test::max_relative_row_error(r.logits.data(), f.prompt_logits[i].data.data(), len, vocab));
    if (static_cast<int>(i) == f.greedy_prompt) {
      EXPECT_EQ(r.output, f.greedy_tokens);
    }
  }
  std::printf("cpu-bf16 vs transformers fp32 prompts: max relative logit error %.3g\n", worst);
  EXPECT_LE(worst, kBf16Tolerance);
}

// --random-weights on cpu-bf16 with a 4-bit config: the loader draws the kept matrices through the backend's
// fill_random_q4 (4 bits a weight where the plain CPU backend holds fp32), and they compute finite logits.
TEST(Q4KeptModel, CpuBf16DrawsRandom4BitWeights) {
  const std::filesystem::path dir = test::fixtures_dir() / "glm_moe_dsa_nvfp4_g16";
  const auto backend = make_cpu_backend(true);
  const auto model = load_model({.dir = dir, .random_weights = true, .seed = 7}, *backend);
  const auto plain = load_model({.dir = dir, .random_weights = true, .seed = 7}, *make_cpu_backend());
  EXPECT_LT(model->info().weight_bytes, plain->info().weight_bytes);
  Engine engine(*model, *backend, {.block_size = 4, .kv_blocks = 64});
  const int64_t id = engine.add({.prompt = {5, 9, 13, 2, 77, 31, 8}, .max_new_tokens = 6, .keep_logits = true});
  engine.run();
  const RequestResult& r = engine.result(id);
  ASSERT_EQ(r.output.size(), 6u);
  ASSERT_FALSE(r.logits.empty());
  for (float v : r.logits) ASSERT_TRUE(std::isfinite(v));
}

// Gate and up of one expert with different tensor scales (ModelOpt shares one per pair, the format allows
// two): each part's rows keep their own weight_scale_2, and both still decode to the CPU's dequantisation.
TEST_F(Q4Kept, Nvfp4StackedPartsWithTheirOwnTensorScales) {
  const std::string p = "model.layers.1.mlp.experts.6.";
  const Checkpoint source = Checkpoint::open(test::fixtures_dir() / "glm_moe_dsa_nvfp4");
  float up_scale = 0.0f;
  std::memcpy(&up_scale, source.find(p + "up_proj.weight_scale_2")->data, 4);
  const float doubled = 2.0f * up_scale;
  const auto dir = std::filesystem::temp_directory_path() / ("sy_q4_kept_scale2_" + std::to_string(getpid()));
  ASSERT_EQ(test::load_edited_copy(dir, test::fixtures_dir() / "glm_moe_dsa_nvfp4",
                                   test::replace_tensor(p + "up_proj.weight_scale_2", DType::f32, Shape{}, &doubled)),
            "");
  open_dir(dir);
  auto l = loader(host_, store_);
  const int64_t H = desc_.hidden, I = desc_.moe.inter;
  const MatrixArray gu = l->allocate_matrices(p + "gate_proj.weight", {I, H}, 1, 2 * I, H, I);
  l->load_matrix_into(p + "gate_proj.weight", {I, H}, gu, 0, 0);
  l->load_matrix_into(p + "up_proj.weight", {I, H}, gu, 0, I);
  const Matrix gate = l->matrix_at(gu, 0, 0), up = l->matrix_at(gu, 0, I);
  float gate_scale = 0.0f;
  std::memcpy(&gate_scale, ckpt_->find(p + "gate_proj.weight_scale_2")->data, 4);
  ASSERT_NE(gate_scale, doubled);
  EXPECT_EQ(gate.q.row_scales[I - 1], gate_scale);
  EXPECT_EQ(up.q.row_scales[0], doubled);
  EXPECT_EQ(decode(gate, I, H), dequantised(p + "gate_proj.weight", {I, H}));
  EXPECT_EQ(decode(up, I, H), dequantised(p + "up_proj.weight", {I, H}));
  std::filesystem::remove_all(dir);
}

// INT4 group scales other than BF16 (the kernels read bf16 scales): the experts are dequantised at load instead.
TEST_F(Q4Kept, Int4WithF16ScalesIsDequantised) {
  std::vector<std::vector<uint16_t>> halves;
  test::EditTensors edit = [&](std::vector<TensorToWrite>& tensors) {
    for (TensorToWrite& t : tensors) {
      if (!t.name.ends_with(".weight_scale") || t.dtype != DType::bf16) continue;
      std::vector<float> f(static_cast<size_t>(t.shape.numel()));
      convert_to_f32(t.data, DType::bf16, f.data(), f.size());
      auto& h = halves.emplace_back(f.size());
      for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_f16(f[i]);
      t.dtype = DType::f16;
      t.data = h.data();
    }
  };
  const auto dir = std::filesystem::temp_directory_path() / ("sy_q4_kept_f16_" + std::to_string(getpid()));
  ASSERT_EQ(test::load_edited_copy(dir, test::fixtures_dir() / "deepseek_v3_kimi_int4", edit), "");
  open_dir(dir);
  const MoeWeights w = bind_moe(*loader(host_, store_), "model.layers.2.mlp.", kProjMlpNames, moe_config(desc_));
  EXPECT_TRUE(w.gate_up.q.dense());
  EXPECT_TRUE(w.down.q.dense());
  std::filesystem::remove_all(dir);
}

TEST_F(Q4Kept, APartStoredOtherwiseIsRefused) {
  open("deepseek_v3_kimi_int4");
  auto l = loader(host_, store_);
  const int64_t H = desc_.hidden;
  // The shared expert's gate (F32 [40, 64], on the ignore list) into an INT4 array made for a routed expert.
  const MatrixArray a = l->allocate_matrices("model.layers.2.mlp.experts.0.gate_proj.weight", {20, H}, 1, 40, H, 40);
  ASSERT_EQ(a.first.q.format, WeightFormat::int4_group);
  try {
    l->load_matrix_into("model.layers.2.mlp.shared_experts.gate_proj.weight", {40, H}, a, 0, 0);
    FAIL() << "a part stored in F32 was accepted into an INT4 array";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("must be stored alike"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace sy
