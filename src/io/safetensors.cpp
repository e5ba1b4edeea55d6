// Safetensors reading (mmap + header validation), checkpoint folder discovery, and writing.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "base/check.h"
#include "base/input.h"
#include "base/log.h"
#include "io/json_input.h"

namespace sy {

namespace fs = std::filesystem;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // real headers are a few MB at most
constexpr const char* kIndexName = "model.safetensors.index.json";

std::string errno_text() { return std::strerror(errno); }

// Closes the descriptor on every path out of SafetensorsFile::open.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  // Closes now so that a failing close() is reported rather than swallowed.
  int release_and_close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// numel * elem_size in bytes, or false when the product does not fit in 64 bits.
bool tensor_bytes(const Shape& shape, size_t elem_size, uint64_t* out) {
  uint64_t n = elem_size;
  for (int i = 0; i < shape.rank(); ++i) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(shape[i]), &n)) return false;
  }
  *out = n;
  return true;
}

struct ParsedEntry {
  TensorInfo info;
  uint64_t begin = 0;  // byte range [begin, end) within the data section
  uint64_t end = 0;
};

ParsedEntry parse_entry(const std::string& file, const std::string& tensor_name, const json& entry,
                        uint64_t data_size) {
  const std::string name = cut_for_message(tensor_name);  // as messages show it
  SY_CHECK(entry.is_object(),
           "{}: tensor '{}' header entry is {} but must be an object with dtype, shape and data_offsets", file, name,
           entry.type_name());
  ParsedEntry p;
  p.info.name = tensor_name;

  const auto dt = entry.find("dtype");
  SY_CHECK(dt != entry.end() && dt->is_string(), "{}: tensor '{}' has no \"dtype\" string", file, name);
  const std::string dtype_str = cut_for_message(dt->get<std::string>());
  SY_CHECK(parse_dtype(dtype_str, &p.info.dtype),
           "{}: tensor '{}' has unknown dtype \"{}\" (expected one of F64, F32, F16, BF16, F8_E4M3, F8_E5M2, "
           "I64, I32, I16, I8, U8, BOOL)",
           file, name, dtype_str);

  const auto sh = entry.find("shape");
  SY_CHECK(sh != entry.end() && sh->is_array(), "{}: tensor '{}' has no \"shape\" array", file, name);
  SY_CHECK(sh->size() <= static_cast<size_t>(kMaxDims),
           "{}: tensor '{}' shape {} has rank {} but at most {} is supported", file, name, json_for_message(*sh),
           sh->size(), kMaxDims);
  for (const json& d : *sh) {
    SY_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
             "{}: tensor '{}' shape {} has dimension {}; dimensions must be non-negative integers", file, name,
             json_for_message(*sh), json_for_message(d));
    p.info.shape.push_back(d.get<int64_t>());
  }

  const auto off = entry.find("data_offsets");
  SY_CHECK(off != entry.end() && off->is_array() && off->size() == 2 && (*off)[0].is_number_unsigned() &&
               (*off)[1].is_number_unsigned(),
           "{}: tensor '{}' data_offsets {} must be [begin, end] with non-negative integers", file, name,
           off == entry.end() ? std::string("(missing)") : json_for_message(*off));
  p.begin = (*off)[0].get<uint64_t>();
  p.end = (*off)[1].get<uint64_t>();
  SY_CHECK(p.begin <= p.end, "{}: tensor '{}' data_offsets [{}, {}) have begin after end", file, name, p.begin, p.end);

  uint64_t need = 0;
  SY_CHECK(tensor_bytes(p.info.shape, dtype_size(p.info.dtype), &need),
           "{}: tensor '{}' {} {} has a byte size that overflows 64 bits", file, name, dtype_str, p.info.shape.str());
  SY_CHECK(p.end - p.begin == need, "{}: tensor '{}' data_offsets [{}, {}) hold {} bytes but {} {} needs {}", file,
           name, p.begin, p.end, p.end - p.begin, dtype_str, p.info.shape.str(), need);
  SY_CHECK(p.end <= data_size,
           "{}: tensor '{}' data_offsets [{}, {}) reach past the end of the data section, which holds {} bytes (file "
           "truncated?)",
           file, name, p.begin, p.end, data_size);
  p.info.nbytes = static_cast<size_t>(need);
  return p;
}

// Non-empty tensors must tile [0, data_size) exactly: no overlap, no gap, no trailing bytes.
// Empty tensors hold no bytes, so only their bounds (checked in parse_entry) matter.
void check_layout(const std::string& file, std::vector<ParsedEntry>& entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const ParsedEntry& a, const ParsedEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.info.name < b.info.name;
  });
  const ParsedEntry* prev = nullptr;
  for (const ParsedEntry& e : entries) {
    if (e.begin == e.end) continue;
    const uint64_t prev_end = prev ? prev->end : 0;
    if (e.begin < prev_end) {
      SY_FAIL("{}: tensors '{}' data_offsets [{}, {}) and '{}' data_offsets [{}, {}) overlap", file,
              cut_for_message(prev->info.name), prev->begin, prev->end, cut_for_message(e.info.name), e.begin, e.end);
    }
    if (e.begin > prev_end) {
      if (prev) {
        SY_FAIL(
            "{}: gap of {} bytes between tensor '{}' (ends at {}) and tensor '{}' (begins at {}); tensors must be "
            "packed contiguously",
            file, e.begin - prev_end, cut_for_message(prev->info.name), prev_end, cut_for_message(e.info.name),
            e.begin);
      }
      SY_FAIL("{}: tensor '{}' begins at data offset {} but the first tensor must begin at 0", file,
              cut_for_message(e.info.name), e.begin);
    }
    prev = &e;
  }
  const uint64_t used = prev ? prev->end : 0;
  SY_CHECK(used == data_size, "{}: data section holds {} bytes but the tensors cover only [0, {}) (last tensor '{}')",
           file, data_size, used, prev ? cut_for_message(prev->info.name) : std::string("(none)"));
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const fs::path& path) {
  const std::string file = path.string();
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;

  // O_NONBLOCK: a FIFO in place of a shard must not make open wait for a writer (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SY_CHECK(fd >= 0, "{}: cannot open: {}", file, errno_text());
  FdGuard guard(fd);
  struct stat st {};
  SY_CHECK(::fstat(fd, &st) == 0, "{}: fstat failed: {}", file, errno_text());
  SY_CHECK(S_ISREG(st.st_mode), "{}: cannot read safetensors file: not a regular file", file);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  SY_CHECK(file_size >= 8, "{}: file is {} bytes but a safetensors file needs at least 8 (the header length)", file,
           file_size);

  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  SY_CHECK(map != MAP_FAILED, "{}: mmap of {} bytes failed: {}", file, file_size, errno_text());
  f->map_ = map;  // from here the destructor unmaps, also when validation below throws
  f->map_size_ = file_size;
  SY_CHECK(guard.release_and_close() == 0, "{}: close failed: {}", file, errno_text());

  const auto* bytes = static_cast<const unsigned char*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  SY_CHECK(header_len <= file_size - 8,
           "{}: header length {} exceeds the {} bytes after the 8-byte length prefix (file is {} bytes: truncated, or "
           "not a safetensors file)",
           file, header_len, file_size - 8, file_size);
  SY_CHECK(header_len < kMaxHeaderBytes, "{}: header length {} is not below the sanity limit of {} bytes", file,
           header_len, kMaxHeaderBytes);

  const char* header = reinterpret_cast<const char*>(bytes + 8);
  const json j = parse_json_input(std::string_view(header, header_len), file, "header");
  SY_CHECK(j.is_object(), "{}: header is a JSON {} but must be an object of tensor entries", file, j.type_name());

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  std::vector<ParsedEntry> entries;
  entries.reserve(j.size());
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      SY_CHECK(value.is_object(), "{}: __metadata__ is {} but must be an object of strings", file, value.type_name());
      for (const auto& [mk, mv] : value.items()) {
        SY_CHECK(mv.is_string(), "{}: __metadata__ entry '{}' is {} but must be a string", file, cut_for_message(mk),
                 json_for_message(mv));
        f->metadata_.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(file, key, value, data_size));
  }
  check_layout(file, entries, data_size);

  const auto* data = reinterpret_cast<const std::byte*>(bytes + data_start);
  f->tensors_.reserve(entries.size());
  for (ParsedEntry& e : entries) {
    e.info.file = path.filename().string();
    e.info.data = data + e.begin;
    f->tensors_.push_back(std::move(e.info));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr && ::munmap(map_, map_size_) != 0) {
    log_warn("{}: munmap failed: {}", path_.string(), errno_text());
  }
}

namespace {

struct Discovered {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  bool indexed = false;
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name, when indexed
};

Discovered open_indexed(const fs::path& dir) {
  const fs::path index_path = dir / kIndexName;
  const std::string index = index_path.string();
  const json j = parse_json_input(read_regular_file(index_path, kMaxJsonFileBytes, kIndexName), index, "index");
  SY_CHECK(j.is_object(), "{}: is a JSON {} but must be an object with a \"weight_map\"", index, j.type_name());
  const auto wm = j.find("weight_map");
  SY_CHECK(wm != j.end() && wm->is_object(), "{}: has no \"weight_map\" object (tensor name -> shard file)", index);

  Discovered d;
  d.indexed = true;
  std::set<std::string> shard_names;  // sorted, so shards open in a stable order
  for (const auto& [tensor, shard] : wm->items()) {
    SY_CHECK(shard.is_string(), "{}: weight_map entry '{}' is {} but must be a shard file name", index,
             cut_for_message(tensor), json_for_message(shard));
    const std::string s = shard.get<std::string>();
    SY_CHECK(!s.empty() && s != "." && s != ".." && fs::path(s).filename().string() == s,
             "{}: weight_map entry '{}' names shard '{}', which is not a plain file name in {}", index,
             cut_for_message(tensor), cut_for_message(s), dir.string());
    d.weight_map.emplace(tensor, s);
    if (shard_names.insert(s).second) {
      const fs::path p = dir / s;
      std::error_code ec;
      SY_CHECK(fs::is_regular_file(p, ec), "{}: tensor '{}' is mapped to shard '{}' but {} is not a regular file",
               index, cut_for_message(tensor), cut_for_message(s), cut_for_message(p.string(), 400));
    }
  }
  for (const std::string& s : shard_names) d.files.push_back(SafetensorsFile::open(dir / s));
  return d;
}

// The index's shards, else model.safetensors, else every *.safetensors (sorted).
Discovered open_files(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / kIndexName, ec)) return open_indexed(dir);
  Discovered d;
  if (fs::is_regular_file(dir / "model.safetensors", ec)) {
    d.files.push_back(SafetensorsFile::open(dir / "model.safetensors"));
    return d;
  }
  std::vector<fs::path> found;
  fs::directory_iterator it(dir, ec);
  SY_CHECK(!ec, "{}: cannot list directory: {}", dir.string(), ec.message());
  for (const fs::directory_entry& e : it) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  SY_CHECK(!found.empty(), "no .safetensors files in {} (expected model.safetensors, or shards listed in {})",
           dir.string(), kIndexName);
  for (const fs::path& p : found) d.files.push_back(SafetensorsFile::open(p));
  return d;
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  SY_CHECK(fs::is_directory(dir, ec), "{}: checkpoint directory does not exist or is not a directory", dir.string());
  Discovered d = open_files(dir);
  Checkpoint c;
  c.dir_ = dir;
  c.files_ = std::move(d.files);

  for (const auto& f : c.files_) {
    for (const TensorInfo& t : f->tensors()) {
      const auto [it, inserted] = c.by_name_.emplace(t.name, &t);
      SY_CHECK(inserted, "{}: tensor '{}' appears in both {} and {}; each tensor must be stored once", dir.string(),
               cut_for_message(t.name), it->second->file, t.file);
    }
  }

  if (d.indexed) {
    const std::string index = (dir / kIndexName).string();
    for (const auto& [tensor, shard] : d.weight_map) {
      const auto it = c.by_name_.find(tensor);
      SY_CHECK(it != c.by_name_.end(), "{}: tensor '{}' is mapped to {} but that file has no such tensor", index,
               cut_for_message(tensor), shard);
      SY_CHECK(it->second->file == shard, "{}: tensor '{}' is mapped to {} but is stored in {}", index,
               cut_for_message(tensor), shard, it->second->file);
    }
    for (const auto& [name, info] : c.by_name_) {
      SY_CHECK(d.weight_map.contains(name), "{}: tensor '{}' is not in the weight_map of {}",
               (dir / info->file).string(), cut_for_message(name), index);
    }
  }

  c.ordered_.reserve(c.by_name_.size());
  for (const auto& [name, info] : c.by_name_) c.ordered_.push_back(info);
  return c;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const TensorInfo* t : ordered_) n += t->nbytes;
  return n;
}

void write_safetensors(const fs::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    SY_CHECK(!t.name.empty() && t.name != "__metadata__", "{}: cannot write a tensor named '{}'", file, t.name);
    SY_CHECK(!header.contains(t.name), "{}: tensor '{}' given twice", file, t.name);
    json shape = json::array();
    for (int i = 0; i < t.shape.rank(); ++i) {
      SY_CHECK(t.shape[i] >= 0, "{}: tensor '{}' shape {} has a negative dimension", file, t.name, t.shape.str());
      shape.push_back(t.shape[i]);
    }
    uint64_t nbytes = 0;
    SY_CHECK(tensor_bytes(t.shape, dtype_size(t.dtype), &nbytes), "{}: tensor '{}' shape {} overflows", file, t.name,
             t.shape.str());
    SY_CHECK(nbytes == 0 || t.data != nullptr, "{}: tensor '{}' has {} bytes but no data", file, t.name, nbytes);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    SY_FAIL("{}: cannot encode header: {}", file, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SY_CHECK(out.is_open(), "{}: cannot create: {}", file, errno_text());
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const TensorToWrite& t : tensors) {
    const size_t nbytes = static_cast<size_t>(t.shape.numel()) * dtype_size(t.dtype);
    if (nbytes) out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(nbytes));
  }
  out.close();
  SY_CHECK(!out.fail(), "{}: write failed: {}", file, errno_text());
}

}  // namespace sy
