// Input limits: cut values for messages, the JSON nesting pre-scan, bounded reads of regular files.
#include "base/input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace sy {

namespace {

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string cut_for_message(std::string_view value, size_t keep) {
  size_t end = std::min(value.size(), keep);
  // Back off to the start of a UTF-8 sequence so that a multi-byte character is never split.
  if (end < value.size()) {
    while (end > 0 && (static_cast<unsigned char>(value[end]) & 0xC0) == 0x80) --end;
  }
  std::string out;
  out.reserve(end + 16);
  for (size_t i = 0; i < end; ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (end < value.size()) out += fmt::format("… ({} bytes)", value.size());
  return out;
}

void check_json_depth(std::string_view text, std::string_view source, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        SY_CHECK(++depth <= max_depth,
                 "{}: JSON nested deeper than {} levels (at byte {}); no model or tokenizer file nests that deep",
                 source, max_depth, i);
        break;
      case ']':
      case '}':
        --depth;  // unbalanced brackets are the parser's to report
        break;
      default:
        break;
    }
  }
}

std::string read_regular_file(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what) {
  const std::string file = path.string();
  struct stat st {};
  SY_CHECK(::stat(path.c_str(), &st) == 0, "{}: cannot read {}: {}", file, what, std::strerror(errno));
  SY_CHECK(S_ISREG(st.st_mode), "{}: cannot read {}: it is {}, not a regular file", file, what, file_kind(st.st_mode));
  SY_CHECK(static_cast<uint64_t>(st.st_size) <= max_bytes, "{}: {} is {} bytes, over the limit of {} bytes ({} MiB)",
           file, what, st.st_size, max_bytes, max_bytes >> 20);
  // O_NONBLOCK: should the path have become a FIFO since stat, open must not wait for a writer.
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  SY_CHECK(fd.get() >= 0, "{}: cannot open {}: {}", file, what, std::strerror(errno));
  struct stat fst {};
  SY_CHECK(::fstat(fd.get(), &fst) == 0 && S_ISREG(fst.st_mode), "{}: cannot read {}: not a regular file", file, what);
  // One byte more than the file holds, so that a file that grew since fstat is noticed; never more
  // than max_bytes + 1.
  const auto capacity_limit = static_cast<size_t>(max_bytes + 1);
  std::string out(std::min(static_cast<size_t>(fst.st_size) + 1, capacity_limit), '\0');
  size_t done = 0;
  for (;;) {
    if (done == out.size()) {
      SY_CHECK(out.size() < capacity_limit, "{}: {} is over the limit of {} bytes ({} MiB)", file, what, max_bytes,
               max_bytes >> 20);
      out.resize(std::min(capacity_limit, 2 * out.size() + 4096));
    }
    const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    SY_CHECK(n >= 0, "{}: read of {} failed: {}", file, what, std::strerror(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace sy
