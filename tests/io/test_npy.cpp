// .npy files: float32 arrays round-trip with a version 1.0 header; v2/v3 headers and '<f8' data are read;
// other dtypes, Fortran order and short files are errors naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "io/npy.h"

namespace sy {
namespace {

namespace fs = std::filesystem;

// A file path under the system temp dir, removed when the test ends.
class TempFile {
 public:
  TempFile() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            fmt::format("sy-npy-{}-{}-{:08x}.npy", test->name(), ::getpid(), std::random_device{}());
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

// An .npy file as NumPy writes it: magic, version, little-endian header length (2 bytes for v1, 4 for
// v2/v3), the dict padded with spaces and a newline to a multiple of 64, then the raw data.
std::string npy_bytes(int major, const std::string& dict, const std::string& data) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  header.append((64 - (6 + 2 + len_bytes + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < len_bytes; ++i) out += static_cast<char>(header.size() >> (8 * i));
  return out + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string read_error(const fs::path& path) {
  try {
    read_npy_f32(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "read_npy_f32(" << path << ") accepted a malformed file";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

TEST(Npy, RoundTrip2d) {
  TempFile f;
  std::vector<float> values(15);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * float(i) - 3.0f;
  write_npy_f32(f.path(), values.data(), {3, 5});

  const std::string bytes = read_bytes(f.path());
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<unsigned char>(bytes[8]) | (size_t(static_cast<unsigned char>(bytes[9])) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(bytes.size(), 10 + header_len + 15 * 4);
  const std::string dict = bytes.substr(10, header_len);
  EXPECT_EQ(dict.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }", 0), 0u) << dict;
  EXPECT_EQ(dict.back(), '\n');

  const NpyArray a = read_npy_f32(f.path());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(a.data, values);
}

TEST(Npy, RoundTrip1dWritesOneTuple) {
  TempFile f;
  const std::vector<float> values = {1.0f, -2.0f, 3.5f, 0.0f, 1e30f, -1e-30f, 7.0f};
  write_npy_f32(f.path(), values.data(), {7});
  EXPECT_NE(read_bytes(f.path()).find("'shape': (7,), }"), std::string::npos);
  const NpyArray a = read_npy_f32(f.path());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(a.data, values);
}

TEST(Npy, RoundTripEmpty) {
  TempFile f;
  write_npy_f32(f.path(), nullptr, {2, 0});
  const NpyArray a = read_npy_f32(f.path());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 0}));
  EXPECT_TRUE(a.data.empty());
}

TEST(Npy, ReadsVersion2And3Headers) {
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  for (int major : {2, 3}) {
    SCOPED_TRACE(major);
    TempFile f;
    write_bytes(f.path(), npy_bytes(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw(values)));
    const NpyArray a = read_npy_f32(f.path());
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.data, values);
  }
}

TEST(Npy, ConvertsFloat64) {
  TempFile f;
  const std::vector<double> values = {0.25, -1.5, 1e10};
  write_bytes(f.path(), npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", raw(values)));
  const NpyArray a = read_npy_f32(f.path());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(a.data, (std::vector<float>{0.25f, -1.5f, 1e10f}));
}

TEST(Npy, WrongDescrFails) {
  for (const char* descr : {"<i4", ">f4", "<f2"}) {
    SCOPED_TRACE(descr);
    TempFile f;
    write_bytes(f.path(), npy_bytes(1, fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (2,), }}", descr),
                                    std::string(8, '\0')));
    const std::string msg = read_error(f.path());
    EXPECT_CONTAINS(msg, f.path().filename().string());
    EXPECT_CONTAINS(msg, fmt::format("'{}'", descr));
  }
}

TEST(Npy, FortranOrderFails) {
  TempFile f;
  write_bytes(f.path(),
              npy_bytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0')));
  const std::string msg = read_error(f.path());
  EXPECT_CONTAINS(msg, f.path().filename().string());
  EXPECT_CONTAINS(msg, "Fortran");
}

TEST(Npy, TruncatedDataFails) {
  TempFile f;
  const std::vector<float> values(15, 1.0f);
  write_npy_f32(f.path(), values.data(), {3, 5});
  fs::resize_file(f.path(), fs::file_size(f.path()) - 4);
  const std::string msg = read_error(f.path());
  EXPECT_CONTAINS(msg, f.path().filename().string());
  EXPECT_CONTAINS(msg, "holds 56 bytes");
  EXPECT_CONTAINS(msg, "[3, 5] needs 60");
}

TEST(Npy, TruncatedHeaderFails) {
  TempFile f;
  const std::vector<float> values(3, 1.0f);
  write_npy_f32(f.path(), values.data(), {3});
  fs::resize_file(f.path(), 40);
  const std::string msg = read_error(f.path());
  EXPECT_CONTAINS(msg, f.path().filename().string());
  EXPECT_CONTAINS(msg, "header length 118");
}

TEST(Npy, NotAnNpyFileFails) {
  TempFile f;
  write_bytes(f.path(), "PK\x03\x04 this is a zip");
  EXPECT_CONTAINS(read_error(f.path()), "not an npy file");
}

TEST(Npy, MalformedDictFails) {
  TempFile f;
  write_bytes(f.path(), npy_bytes(1, "{'descr': '<f4', 'shape': (2, }", std::string(8, '\0')));
  const std::string msg = read_error(f.path());
  EXPECT_CONTAINS(msg, f.path().filename().string());
  EXPECT_CONTAINS(msg, "malformed npy header");
}

}  // namespace
}  // namespace sy
