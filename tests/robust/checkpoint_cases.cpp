// Broken checkpoints under a good config.json, each tried with inspect, plan and generate: safetensors
// files truncated, of garbage, with bad headers (syntax, nesting, numbers, dtypes, shapes, offsets,
// names), not regular files, disagreeing with the config; and broken model.safetensors.index.json files.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "robust/robust_case.h"

namespace sy::robust {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

struct Safetensors {
  std::string header;  // JSON text
  std::string data;
};

Safetensors read_fixture_safetensors() {
  const std::string bytes = read_file(fixture("qwen3_moe_base") / "model.safetensors");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return {.header = bytes.substr(8, len), .data = bytes.substr(8 + len)};
}

std::string encode(const std::string& header, const std::string& data, std::optional<uint64_t> len = std::nullopt) {
  const uint64_t n = len.value_or(header.size());
  std::string out;
  out.reserve(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
  out.append(header);
  out.append(data);
  return out;
}

using Setup = std::function<void(const fs::path&)>;

// The fixture with model.safetensors replaced by `bytes`.
Setup with_file_bytes(std::function<std::string()> bytes) {
  return [bytes = std::move(bytes)](const fs::path& d) {
    copy_fixture("qwen3_moe_base", d / "m");
    write_file(d / "m/model.safetensors", bytes());
  };
}

// The fixture's checkpoint with its header changed (as JSON); the data kept.
Setup with_header(std::function<void(json&)> change) {
  return with_file_bytes([change = std::move(change)] {
    const Safetensors s = read_fixture_safetensors();
    json h = json::parse(s.header);
    change(h);
    return encode(h.dump(), s.data);
  });
}

// The first tensor entry (by name) of a header.
json& first_tensor(json& h) {
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() != "__metadata__") return it.value();
  }
  return h;
}

// A field of the first tensor replaced by raw JSON text.
Setup with_tensor_field_text(const std::string& field, const std::string& text) {
  return with_file_bytes([field, text] {
    const Safetensors s = read_fixture_safetensors();
    json h = json::parse(s.header);
    first_tensor(h)[field] = "@@V@@";
    std::string header = h.dump();
    header.replace(header.find("\"@@V@@\""), 7, text);
    return encode(header, s.data);
  });
}

// The fixture split into two shards with an index, then `change` applied to the folder.
Setup sharded(std::function<void(const fs::path&, json&)> change) {
  return [change = std::move(change)](const fs::path& d) {
    copy_fixture("qwen3_moe_base", d / "m");
    fs::rename(d / "m/model.safetensors", d / "m/model-00001-of-00001.safetensors");
    const Safetensors s = read_fixture_safetensors();
    json index = {{"metadata", {{"total_size", s.data.size()}}}, {"weight_map", json::object()}};
    const json header = json::parse(s.header);
    for (const auto& [name, entry] : header.items()) {
      if (name != "__metadata__") index["weight_map"][name] = "model-00001-of-00001.safetensors";
    }
    change(d / "m", index);
    if (!index.is_null()) write_file(d / "m/model.safetensors.index.json", index.dump(1));
  };
}

Setup with_config_change(std::function<void(json&)> change) {
  return [change = std::move(change)](const fs::path& d) {
    copy_fixture("qwen3_moe_base", d / "m");
    json c = json::parse(read_file(d / "m/config.json"));
    change(c);
    write_file(d / "m/config.json", c.dump(1));
  };
}

}  // namespace

void add_checkpoint_cases(std::vector<Case>& out) {
  // Truncated and garbage files.
  add_model_cases(out, "st_empty", with_file_bytes([] { return std::string(); }),
                  "a safetensors file needs at least 8");
  add_model_cases(out, "st_four_bytes", with_file_bytes([] { return std::string("\x10\0\0\0", 4); }),
                  "a safetensors file needs at least 8");
  add_model_cases(out, "st_only_length", with_file_bytes([] { return encode("", "", 100); }), "exceeds the 0 bytes");
  add_model_cases(out, "st_truncated_header", with_file_bytes([] {
                    const Safetensors s = read_fixture_safetensors();
                    return encode(s.header, "", s.header.size()).substr(0, 8 + s.header.size() / 2);
                  }),
                  "header length");
  add_model_cases(out, "st_truncated_data", with_file_bytes([] {
                    const Safetensors s = read_fixture_safetensors();
                    return encode(s.header, s.data.substr(0, s.data.size() / 2));
                  }),
                  "reach past the end of the data section");
  add_model_cases(out, "st_length_2_pow_63", with_file_bytes([] { return encode("{}", "", uint64_t{1} << 63); }),
                  "header length 9223372036854775808 exceeds");
  add_model_cases(out, "st_random_bytes", with_file_bytes([] {
                    std::string s(4096, '\0');
                    uint32_t x = 12345;
                    for (char& c : s) c = static_cast<char>((x = x * 1103515245 + 12345) >> 16);
                    return s;
                  }),
                  "model.safetensors");
  add_model_cases(out, "st_header_not_json", with_file_bytes([] { return encode("{not json", ""); }),
                  "header is not valid JSON");
  add_model_cases(out, "st_header_array", with_file_bytes([] { return encode("[]", ""); }), "header is a JSON array");
  add_model_cases(out, "st_header_deep_70000",
                  with_file_bytes([] { return encode("{\"x\":" + deep_json(70000) + "}", ""); }),
                  "nested deeper than 64");
  add_model_cases(out, "st_header_1e400", with_tensor_field_text("data_offsets", "[0, 1e400]"), "number overflow");

  // Tensor entries.
  add_model_cases(out, "st_dtype_unknown", with_tensor_field_text("dtype", "\"Q4_K\""), "unknown dtype \"Q4_K\"");
  add_model_cases(out, "st_dtype_long",
                  with_header([](json& h) { first_tensor(h)["dtype"] = std::string(50000, 'F'); }), "… (50000 bytes)");
  add_model_cases(out, "st_dtype_number", with_tensor_field_text("dtype", "16"), "has no \"dtype\" string");
  add_model_cases(out, "st_shape_negative", with_tensor_field_text("shape", "[-1, 80]"),
                  "dimensions must be non-negative");
  add_model_cases(out, "st_shape_string", with_tensor_field_text("shape", "\"80x80\""), "has no \"shape\" array");
  add_model_cases(out, "st_shape_rank_9", with_tensor_field_text("shape", "[1,1,1,1,1,1,1,1,1]"), "has rank 9");
  add_model_cases(out, "st_shape_deep", with_tensor_field_text("shape", deep_json(41)), "shape");
  add_model_cases(out, "st_shape_overflow", with_tensor_field_text("shape", "[4294967296, 4294967296, 4]"),
                  "overflows 64 bits");
  add_model_cases(out, "st_offsets_missing", with_header([](json& h) { first_tensor(h).erase("data_offsets"); }),
                  "data_offsets (missing)");
  add_model_cases(out, "st_offsets_reversed", with_tensor_field_text("data_offsets", "[100, 0]"),
                  "have begin after end");
  add_model_cases(out, "st_offsets_past_end", with_header([](json& h) {
                    json& t = first_tensor(h);
                    const uint64_t n = t["data_offsets"][1].get<uint64_t>() - t["data_offsets"][0].get<uint64_t>();
                    t["data_offsets"] = {uint64_t{1} << 40, (uint64_t{1} << 40) + n};
                  }),
                  "reach past the end");
  add_model_cases(out, "st_offsets_overlap", with_header([](json& h) {
                    std::vector<json*> ts;
                    for (auto it = h.begin(); it != h.end(); ++it) {
                      if (it.key() != "__metadata__") ts.push_back(&it.value());
                    }
                    // Two tensors of the same byte size made to share their range.
                    for (size_t i = 0; i < ts.size(); ++i) {
                      for (size_t j = i + 1; j < ts.size(); ++j) {
                        const auto size = [](const json* t) {
                          return (*t)["data_offsets"][1].get<uint64_t>() - (*t)["data_offsets"][0].get<uint64_t>();
                        };
                        if (size(ts[i]) == size(ts[j]) && size(ts[i]) > 0) {
                          (*ts[j])["data_offsets"] = (*ts[i])["data_offsets"];
                          return;
                        }
                      }
                    }
                  }),
                  "overlap");
  add_model_cases(out, "st_entry_not_object", with_header([](json& h) { first_tensor(h) = 5; }), "must be an object");
  add_model_cases(out, "st_metadata_not_strings", with_header([](json& h) {
                    h["__metadata__"] = {{"format", 5}};
                  }),
                  "__metadata__ entry 'format' is 5");
  add_model_cases(out, "st_metadata_deep", with_header([](json& h) {
                    h["__metadata__"] = {{"format", json::parse(deep_json(60))}};
                  }),
                  "__metadata__ entry 'format'");
  add_model_cases(out, "st_tensor_name_newline", with_header([](json& h) {
                    h["bad\nname"] = {{"dtype", "BF16"}, {"shape", json::array()}, {"data_offsets", {0, 0}}};
                  }),
                  "bad\\nname");
  add_model_cases(out, "st_tensor_name_long", with_header([](json& h) {
                    h[std::string(100000, 'n')] = {{"dtype", "BF16"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
                  }),
                  "… (100000 bytes)");

  // Not a regular file; nothing else to read.
  add_model_cases(
      out, "st_is_directory",
      [](const fs::path& d) {
        copy_fixture("qwen3_moe_base", d / "m");
        fs::remove(d / "m/model.safetensors");
        fs::create_directory(d / "m/model.safetensors");
      },
      "no .safetensors files");
  add_model_cases(
      out, "st_is_fifo",
      [](const fs::path& d) {
        copy_fixture("qwen3_moe_base", d / "m");
        fs::remove(d / "m/model.safetensors");
        mkfifo((d / "m/model.safetensors").c_str(), 0644);
      },
      "no .safetensors files");
  add_model_cases(
      out, "st_links_dev_zero",
      [](const fs::path& d) {
        copy_fixture("qwen3_moe_base", d / "m");
        fs::remove(d / "m/model.safetensors");
        fs::create_symlink("/dev/zero", d / "m/model.safetensors");
      },
      "no .safetensors files");
  out.push_back({.name = "st_missing_generate",
                 .setup =
                     [](const fs::path& d) {
                       copy_fixture("qwen3_moe_base", d / "m");
                       fs::remove(d / "m/model.safetensors");
                     },
                 .args = generate_args(),
                 .expect = "no .safetensors files"});

  // Checkpoint and config disagree: generate refuses, so inspect and plan must too.
  add_model_cases(out, "ckpt_hidden_mismatch", with_config_change([](json& c) { c["hidden_size"] = 120; }),
                  "but the config implies");
  add_model_cases(out, "ckpt_fewer_layers_in_config", with_config_change([](json& c) { c["num_hidden_layers"] = 3; }),
                  "tensor(s) this architecture does not use");
  add_model_cases(out, "ckpt_more_layers_in_config", with_config_change([](json& c) { c["num_hidden_layers"] = 5; }),
                  "has no tensor 'model.layers.4.");
  add_model_cases(out, "ckpt_more_experts_in_config", with_config_change([](json& c) { c["num_experts"] = 16; }),
                  "has shape [8, 80] but the config implies [16, 80]");
  add_model_cases(out, "ckpt_vocab_mismatch", with_config_change([](json& c) { c["vocab_size"] = 500; }),
                  "but the config implies");
  add_model_cases(out, "ckpt_architecture_other",
                  with_config_change([](json& c) { c["architectures"] = {"MixtralForCausalLM"}; }),
                  "has no tensor 'model.layers.0.block_sparse_moe.gate.weight'");
  add_model_cases(out, "ckpt_missing_tensor", with_header([](json& h) {
                    // Drop the last tensor of the data section and its bytes stay: the layout check or the binding
                    // fails.
                    h.erase("model.norm.weight");
                  }),
                  "model.safetensors");
  add_model_cases(out, "ckpt_extra_tensor", with_header([](json& h) {
                    h["model.extra.weight"] = {{"dtype", "BF16"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
                  }),
                  "'model.extra.weight'");
  add_model_cases(out, "ckpt_dtype_int8", with_header([](json& h) {
                    json& t = h["model.norm.weight"];
                    const auto begin = t["data_offsets"][0].get<uint64_t>();
                    const auto end = t["data_offsets"][1].get<uint64_t>();
                    t["dtype"] = "I16";
                    t["data_offsets"] = {begin, end};
                  }),
                  "has dtype I16");

  // Sharded checkpoints and their index. inspect and generate read the index (plan as inspect).
  const auto add_index = [&out](const std::string& name, const Setup& setup, const std::string& expect) {
    out.push_back({.name = name + "_inspect", .setup = setup, .args = inspect_args(), .expect = expect});
    out.push_back({.name = name + "_generate", .setup = setup, .args = generate_args(), .expect = expect});
  };
  add_index("index_not_json", sharded([](const fs::path& m, json& i) {
              i = nullptr;
              write_file(m / "model.safetensors.index.json", "{\"weight_map\": ");
            }),
            "index is not valid JSON");
  add_index("index_deep", sharded([](const fs::path& m, json& i) {
              i = nullptr;
              write_file(m / "model.safetensors.index.json", "{\"weight_map\": " + deep_json(70000) + "}");
            }),
            "nested deeper than 64");
  add_index("index_is_directory", sharded([](const fs::path& m, json& i) {
              i = nullptr;
              fs::create_directory(m / "model.safetensors.index.json");
            }),
            "it is a directory, not a regular file");
  add_index("index_is_fifo", sharded([](const fs::path& m, json& i) {
              i = nullptr;
              mkfifo((m / "model.safetensors.index.json").c_str(), 0644);
            }),
            "it is a FIFO");
  add_index("index_links_dev_zero", sharded([](const fs::path& m, json& i) {
              i = nullptr;
              fs::create_symlink("/dev/zero", m / "model.safetensors.index.json");
            }),
            "it is a character device");
  add_index("index_over_64_mib", sharded([](const fs::path& m, json& i) {
              i = nullptr;
              write_file(m / "model.safetensors.index.json", "{}");
              fs::resize_file(m / "model.safetensors.index.json", (uint64_t{64} << 20) + 1);
            }),
            "over the limit");
  add_index("index_array", sharded([](const fs::path&, json& i) { i = json::array(); }),
            "must be an object with a \"weight_map\"");
  add_index("index_no_weight_map", sharded([](const fs::path&, json& i) { i.erase("weight_map"); }),
            "has no \"weight_map\" object");
  add_index("index_shard_number", sharded([](const fs::path&, json& i) { i["weight_map"]["model.norm.weight"] = 7; }),
            "weight_map entry 'model.norm.weight' is 7");
  add_index("index_shard_parent",
            sharded([](const fs::path&, json& i) { i["weight_map"]["model.norm.weight"] = "../x"; }),
            "not a plain file name");
  add_index("index_shard_missing", sharded([](const fs::path&, json& i) {
              i["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors";
            }),
            "is not a regular file");
  add_index("index_shard_is_fifo", sharded([](const fs::path& m, json& i) {
              mkfifo((m / "fifo.safetensors").c_str(), 0644);
              i["weight_map"]["model.norm.weight"] = "fifo.safetensors";
            }),
            "is not a regular file");
  add_index("index_tensor_not_in_shard", sharded([](const fs::path&, json& i) {
              i["weight_map"]["model.ghost.weight"] = "model-00001-of-00001.safetensors";
            }),
            "'model.ghost.weight' is mapped to");
  add_index("index_tensor_unlisted",
            sharded([](const fs::path&, json& i) { i["weight_map"].erase("model.norm.weight"); }),
            "is not in the weight_map");
  add_index("index_long_tensor_name", sharded([](const fs::path&, json& i) {
              i["weight_map"][std::string(70000, 'w')] = "model-00001-of-00001.safetensors";
            }),
            "… (70000 bytes)");
}

}  // namespace sy::robust
