// NumPy .npy reading (v1/v2/v3 headers, '<f4' or '<f8', C order) and writing (v1.0, '<f4').
#include "io/npy.h"

#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#include "base/check.h"

namespace sy {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "npy '<f4' data is written as host floats");

namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes, then major and minor version
constexpr size_t kMagicLen = 6;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The header dict is a Python literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  bool has_descr = false, has_fortran_order = false, has_shape = false;
};

class DictParser {
 public:
  DictParser(std::string file, std::string_view text) : file_(std::move(file)), text_(text) {}

  NpyHeader parse() {
    NpyHeader h;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = parse_string();
      expect(':');
      if (key == "descr") {
        h.descr = parse_string();
        h.has_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = parse_bool();
        h.has_fortran_order = true;
      } else if (key == "shape") {
        h.shape = parse_tuple();
        h.has_shape = true;
      } else {
        fail(fmt::format("unexpected key '{}'", key));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip_space();
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) fail("trailing characters after the dict");
    if (!h.has_descr || !h.has_fortran_order || !h.has_shape) fail("missing 'descr', 'fortran_order' or 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    SY_FAIL("{}: malformed npy header dict {:?} at character {}: {}", file_, std::string(text_), pos_, why);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string parse_string() {
    skip_space();
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    const size_t close = text_.find(q, pos_ + 1);
    if (close == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_ + 1, close - pos_ - 1));
    pos_ = close + 1;
    return s;
  }
  bool parse_bool() {
    skip_space();
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  int64_t parse_int() {
    skip_space();
    int64_t v = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v)) {
        fail("dimension does not fit in 64 bits");
      }
      ++pos_;
    }
    if (pos_ == start) fail("expected a non-negative integer");
    if (peek() == 'L') ++pos_;  // Python 2 long suffix
    return v;
  }
  std::vector<int64_t> parse_tuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (true) {
      skip_space();
      if (peek() == ')') break;
      dims.push_back(parse_int());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail("expected ',' or ')' in shape");
    }
    ++pos_;
    return dims;
  }

  std::string file_;
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

void write_npy_f32(const fs::path& path, const float* data, const std::vector<int64_t>& shape) {
  const std::string file = path.string();
  std::string dims;
  size_t numel = 1;
  for (int64_t d : shape) {
    SY_CHECK(d >= 0, "{}: shape {} has a negative dimension", file, shape_str(shape));
    SY_CHECK(!__builtin_mul_overflow(numel, static_cast<size_t>(d), &numel), "{}: shape {} overflows", file,
             shape_str(shape));
    dims += std::to_string(d) + ", ";
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (a, b); a 1-tuple keeps its comma: (a,)
  if (shape.size() == 1) dims.pop_back();
  SY_CHECK(numel == 0 || data != nullptr, "{}: {} elements but no data", file, numel);
  SY_CHECK(numel <= SIZE_MAX / 4, "{}: shape {} overflows", file, shape_str(shape));

  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t preamble = kMagicLen + 2 + 2;  // magic, version 1.0, u16 header length
  dict.append((64 - (preamble + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  SY_CHECK(dict.size() <= 0xffff, "{}: npy header of {} bytes does not fit version 1.0", file, dict.size());

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SY_CHECK(out.is_open(), "{}: cannot create: {}", file, std::strerror(errno));
  out.write(kMagic, kMagicLen);
  const char pre[4] = {1, 0, static_cast<char>(dict.size() & 0xff), static_cast<char>(dict.size() >> 8)};
  out.write(pre, 4);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  if (numel) out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(numel * 4));
  out.close();
  SY_CHECK(!out.fail(), "{}: write failed: {}", file, std::strerror(errno));
}

NpyArray read_npy_f32(const fs::path& path) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  SY_CHECK(in.is_open(), "{}: cannot open: {}", file, std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SY_CHECK(!in.bad(), "{}: read failed: {}", file, std::strerror(errno));

  SY_CHECK(bytes.size() >= kMagicLen + 2 && bytes.compare(0, kMagicLen, kMagic, kMagicLen) == 0,
           "{}: not an npy file (no \\x93NUMPY magic)", file);
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])); };
  const uint32_t major = byte(6);
  SY_CHECK(major >= 1 && major <= 3, "{}: npy format version {}.{} is not supported (expected 1.0, 2.0 or 3.0)", file,
           major, byte(7));
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t header_start = kMagicLen + 2 + len_bytes;
  SY_CHECK(bytes.size() >= header_start, "{}: file of {} bytes ends inside the npy preamble", file, bytes.size());
  size_t header_len = 0;
  for (size_t i = len_bytes; i-- > 0;) header_len = (header_len << 8) | byte(kMagicLen + 2 + i);
  SY_CHECK(header_len <= bytes.size() - header_start, "{}: npy header length {} runs past the end of the {}-byte file",
           file, header_len, bytes.size());

  const NpyHeader h = DictParser(file, std::string_view(bytes).substr(header_start, header_len)).parse();
  SY_CHECK(h.descr == "<f4" || h.descr == "<f8",
           "{}: npy dtype '{}' is not supported; expected '<f4' or '<f8' (little-endian float32 or float64)", file,
           h.descr);
  SY_CHECK(!h.fortran_order, "{}: npy array of shape {} is in Fortran order; save it C-contiguous", file,
           shape_str(h.shape));

  size_t numel = 1;
  for (int64_t d : h.shape) {
    SY_CHECK(!__builtin_mul_overflow(numel, static_cast<size_t>(d), &numel), "{}: npy shape {} overflows", file,
             shape_str(h.shape));
  }
  const size_t item = h.descr == "<f4" ? 4 : 8;
  size_t need = 0;
  SY_CHECK(!__builtin_mul_overflow(numel, item, &need), "{}: npy shape {} overflows", file, shape_str(h.shape));
  const size_t data_start = header_start + header_len;
  const size_t have = bytes.size() - data_start;
  SY_CHECK(have == need, "{}: npy data holds {} bytes but {} {} needs {}", file, have, h.descr, shape_str(h.shape),
           need);

  NpyArray a;
  a.shape = h.shape;
  a.data.resize(numel);
  const char* src = bytes.data() + data_start;
  if (item == 4) {
    if (numel) std::memcpy(a.data.data(), src, need);
  } else {
    for (size_t i = 0; i < numel; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      a.data[i] = static_cast<float>(v);
    }
  }
  return a;
}

}  // namespace sy
