// Limits on untrusted input (model folders, flags, request bodies): values cut for messages, JSON nesting
// depth, and reading only regular files up to a size limit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace sy {

// A value from input as it may appear in a one-line error: at most `keep` characters (cut at a UTF-8
// boundary), control characters escaped (\n, \t, \xNN), and "… (N bytes)" when it was cut.
inline constexpr size_t kMessageValueChars = 80;
std::string cut_for_message(std::string_view value, size_t keep = kMessageValueChars);

// Arrays and objects nested deeper than this are refused before any recursive JSON parser sees them
// (nlohmann::json parses and dumps recursively; 70,000 levels overflow the stack). Real configs, headers
// and tokenizer files nest fewer than 10 levels.
inline constexpr int kMaxJsonDepth = 64;
// Throws sy::Error naming `source` when `text` nests JSON arrays or objects deeper than max_depth (brackets
// inside strings do not count). Does not otherwise validate the text.
void check_json_depth(std::string_view text, std::string_view source, int max_depth = kMaxJsonDepth);

// config.json, model.safetensors.index.json, generation_config.json and the like: 64 MiB (the largest
// published index is about 2 MiB; tokenizer.json files are read with their own, larger limit).
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{64} << 20;

// The contents of `path`, which must be a regular file (stat before open: a FIFO, a device such as
// /dev/zero, a socket or a directory is an error) of at most max_bytes. `what` names the file's role in
// errors ("config.json", "tokenizer file", ...).
std::string read_regular_file(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what);

}  // namespace sy
