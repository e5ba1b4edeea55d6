// Safetensors and checkpoint folders: good files round-trip exactly; each malformed file or folder is
// rejected with a sy::Error that names the file and the offending tensor or value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/dtype.h"
#include "io/safetensors.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / fmt::format("sy-io-{}-{}-{}-{:08x}", test->test_suite_name(), test->name(),
                                                    ::getpid(), std::random_device{}());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// A safetensors file with a hand-written header, so that tests can build files the writer refuses to.
void write_raw(const fs::path& path, const std::string& header, size_t data_bytes,
               std::optional<uint64_t> header_len = std::nullopt) {
  const uint64_t len = header_len.value_or(header.size());
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(len >> (8 * i));
  bytes += header;
  bytes.append(data_bytes, '\x5a');
  write_text(path, bytes);
}

// The message of the sy::Error that Checkpoint::open(dir) throws; fails the test when it does not throw.
std::string open_error(const fs::path& dir) {
  try {
    Checkpoint::open(dir);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "Checkpoint::open(" << dir << ") accepted a malformed checkpoint";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

template <typename T>
std::vector<T> iota_values(size_t n, T start) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(start + static_cast<T>(i));
  return v;
}

// Tensors of every dtype the engine loads, including an empty one.
struct GoodTensors {
  std::vector<uint16_t> bf16;  // [4, 8]
  std::vector<uint16_t> f16;   // [3]
  std::vector<float> f32;      // [2, 3]
  std::vector<uint8_t> f8;     // [5]
  std::vector<int64_t> i64;    // [4]

  GoodTensors() {
    for (int i = 0; i < 32; ++i) bf16.push_back(f32_to_bf16(0.25f * float(i - 16)));
    f16 = {0x3c00, 0xc000, 0x7bff};
    f32 = {1.5f, -2.25f, 3.0f, 0.0f, 1e-20f, -7.0f};
    f8 = {0x38, 0x7e, 0x01, 0xb8, 0x00};
    i64 = {0, -1, int64_t(1) << 40, 7};
  }
  std::vector<TensorToWrite> list() const {
    return {
        {"model.embed_tokens.weight", DType::bf16, {4, 8}, bf16.data()},
        {"model.norm.weight", DType::f16, {3}, f16.data()},
        {"lm_head.weight", DType::f32, {2, 3}, f32.data()},
        {"model.layers.0.mlp.experts.0.down_proj.weight", DType::f8_e4m3, {5}, f8.data()},
        {"model.layers.0.positions", DType::i64, {4}, i64.data()},
        {"model.layers.0.empty", DType::f32, {0, 4}, nullptr},
    };
  }
};

void expect_same(const TensorInfo& got, const TensorToWrite& want, const std::string& file) {
  SCOPED_TRACE(want.name);
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.dtype, want.dtype);
  EXPECT_EQ(got.shape, want.shape) << got.shape.str() << " vs " << want.shape.str();
  EXPECT_EQ(got.file, file);
  const size_t nbytes = static_cast<size_t>(want.shape.numel()) * dtype_size(want.dtype);
  ASSERT_EQ(got.nbytes, nbytes);
  ASSERT_NE(got.data, nullptr);
  if (nbytes) {
    EXPECT_EQ(std::memcmp(got.data, want.data, nbytes), 0);
  }
}

TEST(Safetensors, WriteThenOpenFileKeepsOrderDtypesShapesAndBytes) {
  TempDir dir;
  const GoodTensors good;
  const std::vector<TensorToWrite> list = good.list();
  write_safetensors(dir / "model.safetensors", list, {{"format", "pt"}});

  // Header padded so that the data section starts 8-byte aligned.
  std::ifstream in(dir / "model.safetensors", std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len[i];
  EXPECT_EQ(header_len % 8, 0u);

  const auto f = SafetensorsFile::open(dir / "model.safetensors");
  ASSERT_EQ(f->tensors().size(), list.size());
  for (size_t i = 0; i < list.size(); ++i) expect_same(f->tensors()[i], list[i], "model.safetensors");
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->path(), dir / "model.safetensors");
}

TEST(Safetensors, SingleFileCheckpoint) {
  TempDir dir;
  const GoodTensors good;
  const std::vector<TensorToWrite> list = good.list();
  write_safetensors(dir / "model.safetensors", list);
  write_text(dir / "config.json", "{}");

  const Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.dir(), dir.path());
  ASSERT_EQ(c.tensors().size(), list.size());
  size_t total = 0;
  for (const TensorToWrite& t : list) {
    const TensorInfo* got = c.find(t.name);
    ASSERT_NE(got, nullptr) << t.name;
    expect_same(*got, t, "model.safetensors");
    total += got->nbytes;
  }
  EXPECT_EQ(c.total_bytes(), total);
  EXPECT_EQ(c.find("no.such.tensor"), nullptr);
  for (size_t i = 1; i < c.tensors().size(); ++i) EXPECT_LT(c.tensors()[i - 1]->name, c.tensors()[i]->name);
}

TEST(Safetensors, ShardedCheckpointFollowsIndex) {
  TempDir dir;
  const GoodTensors good;
  const std::vector<TensorToWrite> list = good.list();
  const std::string shard1 = "model-00001-of-00002.safetensors", shard2 = "model-00002-of-00002.safetensors";
  write_safetensors(dir / shard1, {list[0], list[1], list[2]});
  write_safetensors(dir / shard2, {list[3], list[4], list[5]});
  // A stray file the index does not mention is ignored.
  write_safetensors(dir / "stray.safetensors", {{"stray", DType::f32, {1}, good.f32.data()}});
  std::string map;
  for (size_t i = 0; i < list.size(); ++i) {
    map += fmt::format("{}\"{}\": \"{}\"", i ? ", " : "", list[i].name, i < 3 ? shard1 : shard2);
  }
  write_text(dir / "model.safetensors.index.json",
             "{\"metadata\": {\"total_size\": 1234}, \"weight_map\": {" + map + "}}");

  const Checkpoint c = Checkpoint::open(dir.path());
  ASSERT_EQ(c.tensors().size(), list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const TensorInfo* got = c.find(list[i].name);
    ASSERT_NE(got, nullptr) << list[i].name;
    expect_same(*got, list[i], i < 3 ? shard1 : shard2);
  }
  EXPECT_EQ(c.find("stray"), nullptr);
}

TEST(Safetensors, WithoutIndexOrModelFileOpensEverySafetensorsFile) {
  TempDir dir;
  const GoodTensors good;
  const std::vector<TensorToWrite> list = good.list();
  write_safetensors(dir / "b.safetensors", {list[0]});
  write_safetensors(dir / "a.safetensors", {list[1], list[2]});
  write_text(dir / "notes.txt", "not a checkpoint");

  const Checkpoint c = Checkpoint::open(dir.path());
  ASSERT_EQ(c.tensors().size(), 3u);
  expect_same(*c.find(list[0].name), list[0], "b.safetensors");
  expect_same(*c.find(list[2].name), list[2], "a.safetensors");
}

TEST(Safetensors, EmptyFileWithNoTensorsIsValid) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {});
  EXPECT_TRUE(SafetensorsFile::open(dir / "model.safetensors")->tensors().empty());
}

TEST(Safetensors, WriterRejectsDuplicateNames) {
  TempDir dir;
  const float x = 1.0f;
  try {
    write_safetensors(dir / "model.safetensors", {{"w", DType::f32, {1}, &x}, {"w", DType::f32, {1}, &x}});
    ADD_FAILURE() << "duplicate tensor names were written";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "'w'");
  }
}

// --- one malformed single file per test -------------------------------------------------------

// Two tensors: 'attn.q' F32 [2, 3] at [0, 24), 'attn.k' BF16 [4, 8] at [24, 88).
void write_two_tensors(const fs::path& path) {
  const std::vector<float> q(6, 1.0f);
  const std::vector<uint16_t> k(32, 0x3f80);
  write_safetensors(path, {{"attn.q", DType::f32, {2, 3}, q.data()}, {"attn.k", DType::bf16, {4, 8}, k.data()}});
}

TEST(SafetensorsMalformed, TruncatedFile) {
  TempDir dir;
  const fs::path file = dir / "model.safetensors";
  write_two_tensors(file);
  fs::resize_file(file, fs::file_size(file) - 10);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "'attn.k'");
  EXPECT_CONTAINS(msg, "[24, 88)");
  EXPECT_CONTAINS(msg, "78 bytes");
}

TEST(SafetensorsMalformed, ShorterThanLengthPrefix) {
  TempDir dir;
  write_text(dir / "model.safetensors", "abc");
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "3 bytes");
}

TEST(SafetensorsMalformed, HeaderLengthLargerThanFile) {
  TempDir dir;
  write_raw(dir / "model.safetensors", "{}", 0, 1000);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "header length 1000");
  EXPECT_CONTAINS(msg, "10 bytes");
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  TempDir dir;
  write_raw(dir / "model.safetensors", "{\"w\": [not json", 0);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "not valid JSON");
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  TempDir dir;
  write_raw(dir / "model.safetensors", "[1, 2]", 0);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "array");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  TempDir dir;
  write_raw(dir / "model.safetensors", R"({"mlp.gate": {"dtype": "F7", "shape": [2], "data_offsets": [0, 2]}})", 2);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "'mlp.gate'");
  EXPECT_CONTAINS(msg, "\"F7\"");
}

TEST(SafetensorsMalformed, OffsetsDisagreeWithShape) {
  TempDir dir;
  write_raw(dir / "model.safetensors", R"({"x": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 100]}})", 100);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors: tensor 'x' data_offsets [0, 100) hold 100 bytes but BF16 [4, 8] needs 64");
}

TEST(SafetensorsMalformed, NegativeDimension) {
  TempDir dir;
  write_raw(dir / "model.safetensors", R"({"x": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 0]}})", 0);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "'x'");
  EXPECT_CONTAINS(msg, "-1");
}

TEST(SafetensorsMalformed, RankAboveSix) {
  TempDir dir;
  write_raw(dir / "model.safetensors",
            R"({"x": {"dtype": "U8", "shape": [1, 1, 1, 1, 1, 1, 1], "data_offsets": [0, 1]}})", 1);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "'x'");
  EXPECT_CONTAINS(msg, "rank 7");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  TempDir dir;
  write_raw(dir / "model.safetensors",
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
            24);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "'a' data_offsets [0, 16)");
  EXPECT_CONTAINS(msg, "'b' data_offsets [8, 24)");
  EXPECT_CONTAINS(msg, "overlap");
}

TEST(SafetensorsMalformed, GapBetweenTensors) {
  TempDir dir;
  write_raw(dir / "model.safetensors",
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "b": {"dtype": "F32", "shape": [4], "data_offsets": [20, 36]}})",
            36);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "gap of 4 bytes");
  EXPECT_CONTAINS(msg, "'a'");
  EXPECT_CONTAINS(msg, "'b'");
}

TEST(SafetensorsMalformed, OffsetsPastTheEnd) {
  TempDir dir;
  write_raw(dir / "model.safetensors",
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                "b": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})",
            16);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "'b' data_offsets [16, 32)");
  EXPECT_CONTAINS(msg, "holds 16 bytes");
}

TEST(SafetensorsMalformed, TrailingBytesAfterLastTensor) {
  TempDir dir;
  write_raw(dir / "model.safetensors", R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 20);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "holds 20 bytes");
  EXPECT_CONTAINS(msg, "[0, 16)");
}

TEST(SafetensorsMalformed, MetadataValueNotString) {
  TempDir dir;
  write_raw(dir / "model.safetensors", R"({"__metadata__": {"format": 3}})", 0);
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "'format'");
}

// --- malformed folders -----------------------------------------------------------------------

const char* const kShard1 = "model-00001-of-00002.safetensors";
const char* const kShard2 = "model-00002-of-00002.safetensors";

void write_one(const fs::path& path, const std::vector<std::string>& names) {
  const float values[2] = {1.0f, 2.0f};
  std::vector<TensorToWrite> list;
  for (const std::string& n : names) list.push_back({n, DType::f32, {2}, values});
  write_safetensors(path, list);
}

TEST(CheckpointMalformed, IndexReferencesMissingShard) {
  TempDir dir;
  write_one(dir / kShard1, {"w1"});
  write_text(dir / "model.safetensors.index.json",
             fmt::format(R"({{"weight_map": {{"w1": "{}", "w2": "{}"}}}})", kShard1, kShard2));
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors.index.json");
  EXPECT_CONTAINS(msg, "'w2'");
  EXPECT_CONTAINS(msg, kShard2);
}

TEST(CheckpointMalformed, IndexNamesTensorTheShardLacks) {
  TempDir dir;
  write_one(dir / kShard1, {"w1"});
  write_text(dir / "model.safetensors.index.json",
             fmt::format(R"({{"weight_map": {{"w1": "{0}", "ghost": "{0}"}}}})", kShard1));
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "'ghost'");
  EXPECT_CONTAINS(msg, kShard1);
}

TEST(CheckpointMalformed, ShardTensorMissingFromIndex) {
  TempDir dir;
  write_one(dir / kShard1, {"w1", "extra"});
  write_text(dir / "model.safetensors.index.json", fmt::format(R"({{"weight_map": {{"w1": "{}"}}}})", kShard1));
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "'extra'");
  EXPECT_CONTAINS(msg, kShard1);
  EXPECT_CONTAINS(msg, "weight_map");
}

TEST(CheckpointMalformed, IndexMapsTensorToTheWrongShard) {
  TempDir dir;
  write_one(dir / kShard1, {"w1"});
  write_one(dir / kShard2, {"w2"});
  write_text(dir / "model.safetensors.index.json",
             fmt::format(R"({{"weight_map": {{"w1": "{0}", "w2": "{0}"}}}})", kShard1));
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "'w2'");
  EXPECT_CONTAINS(msg, kShard1);
}

TEST(CheckpointMalformed, DuplicateTensorInTwoShards) {
  TempDir dir;
  write_one(dir / kShard1, {"w1", "shared"});
  write_one(dir / kShard2, {"w2", "shared"});
  write_text(dir / "model.safetensors.index.json",
             fmt::format(R"({{"weight_map": {{"w1": "{0}", "shared": "{0}", "w2": "{1}"}}}})", kShard1, kShard2));
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "'shared'");
  EXPECT_CONTAINS(msg, kShard1);
  EXPECT_CONTAINS(msg, kShard2);
}

TEST(CheckpointMalformed, DuplicateTensorWithoutIndex) {
  TempDir dir;
  write_one(dir / "a.safetensors", {"w"});
  write_one(dir / "b.safetensors", {"w"});
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "'w'");
  EXPECT_CONTAINS(msg, "a.safetensors");
  EXPECT_CONTAINS(msg, "b.safetensors");
}

TEST(CheckpointMalformed, IndexNotJson) {
  TempDir dir;
  write_one(dir / kShard1, {"w1"});
  write_text(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "model.safetensors.index.json");
  EXPECT_CONTAINS(msg, "not valid JSON");
}

TEST(CheckpointMalformed, IndexShardNameWithDirectory) {
  TempDir dir;
  write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"w": "../elsewhere.safetensors"}})");
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "'w'");
  EXPECT_CONTAINS(msg, "../elsewhere.safetensors");
}

TEST(CheckpointMalformed, EmptyDir) {
  TempDir dir;
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "no .safetensors files in " + dir.path().string());
}

TEST(CheckpointMalformed, MissingDir) {
  TempDir dir;
  const std::string msg = open_error(dir / "absent");
  EXPECT_CONTAINS(msg, (dir / "absent").string());
  EXPECT_CONTAINS(msg, "does not exist");
}

}  // namespace
}  // namespace sy
