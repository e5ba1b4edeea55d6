// Broken tokenizer folders through `switchyard tokenize`: tokenizer.json, tokenizer_config.json and
// tiktoken.model broken in syntax, nesting, types, values, and as files that are not regular files.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "robust/robust_case.h"

namespace sy::robust {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

using Setup = std::function<void(const fs::path&)>;

const std::string kBpe = "text/tokenizers/mistral_legacy";
const std::string kTiktoken = "text/tokenizers/kimi_tiktoken";

std::vector<std::string> tokenize_args() { return {"tokenize", "--model", "{d}/m", "--text", "hello world"}; }

// A copy of tokenizer fixture `name` with `file` replaced by what `make` leaves at its path.
Setup replace_file(const std::string& name, const std::string& file, std::function<void(const fs::path&)> make) {
  return [name, file, make = std::move(make)](const fs::path& d) {
    copy_fixture(name, d / "m");
    fs::remove(d / "m" / file);
    make(d / "m" / file);
  };
}

Setup file_text(const std::string& name, const std::string& file, std::string text) {
  return replace_file(name, file, [text = std::move(text)](const fs::path& p) { write_file(p, text); });
}

// tokenizer.json of the BPE fixture with one change.
Setup bpe_json(std::function<void(json&)> change) {
  return [change = std::move(change)](const fs::path& d) {
    copy_fixture(kBpe, d / "m");
    json j = json::parse(read_file(d / "m/tokenizer.json"));
    change(j);
    write_file(d / "m/tokenizer.json", j.dump());
  };
}

Setup bpe_config(std::function<void(json&)> change) {
  return [change = std::move(change)](const fs::path& d) {
    copy_fixture(kBpe, d / "m");
    json j = json::parse(read_file(d / "m/tokenizer_config.json"));
    change(j);
    write_file(d / "m/tokenizer_config.json", j.dump());
  };
}

// tiktoken.model of the fixture with its lines changed.
Setup tiktoken_lines(std::function<void(std::string&)> change) {
  return [change = std::move(change)](const fs::path& d) {
    copy_fixture(kTiktoken, d / "m");
    std::string text = read_file(d / "m/tiktoken.model");
    change(text);
    write_file(d / "m/tiktoken.model", text);
  };
}

}  // namespace

void add_tokenizer_cases(std::vector<Case>& out) {
  const auto add = [&out](const std::string& name, Setup setup, const std::string& expect) {
    out.push_back({.name = "tok_" + name, .setup = std::move(setup), .args = tokenize_args(), .expect = expect});
  };
  // Input that is strange but valid: read without a crash or a complaint.
  const auto accepted = [&out] {
    out.back().code = 0;
    out.back().lines = 0;
    out.back().expect = "";
  };
  // tokenizer.json as a file.
  add("json_missing", replace_file(kBpe, "tokenizer.json", [](const fs::path&) {}), "tokenizer");
  add("json_empty", file_text(kBpe, "tokenizer.json", ""), "tokenizer.json");
  add(
      "json_truncated",
      [](const fs::path& d) {
        copy_fixture(kBpe, d / "m");
        const std::string t = read_file(d / "m/tokenizer.json");
        write_file(d / "m/tokenizer.json", t.substr(0, t.size() / 2));
      },
      "tokenizer.json");
  add("json_garbage", file_text(kBpe, "tokenizer.json", "\x89PNG\r\n\x1a\n garbage"), "tokenizer.json");
  add("json_array", file_text(kBpe, "tokenizer.json", "[]"), "tokenizer.json");
  add("json_deep_70000", file_text(kBpe, "tokenizer.json", "{\"model\": " + deep_json(70000) + "}"), "tokenizer.json");
  add("json_1e400", file_text(kBpe, "tokenizer.json", "{\"version\": 1e400}"), "tokenizer.json");
  add("json_is_directory", replace_file(kBpe, "tokenizer.json", [](const fs::path& p) { fs::create_directory(p); }),
      "tokenizer.json");
  add("json_is_fifo", replace_file(kBpe, "tokenizer.json", [](const fs::path& p) { mkfifo(p.c_str(), 0644); }),
      "tokenizer.json");
  add("json_links_dev_zero",
      replace_file(kBpe, "tokenizer.json", [](const fs::path& p) { fs::create_symlink("/dev/zero", p); }),
      "tokenizer.json");
  add("json_links_dev_urandom",
      replace_file(kBpe, "tokenizer.json", [](const fs::path& p) { fs::create_symlink("/dev/urandom", p); }),
      "tokenizer.json");
  // tokenizer.json contents.
  add("model_missing", bpe_json([](json& j) { j.erase("model"); }), "model");
  add("model_type_unigram", bpe_json([](json& j) { j["model"]["type"] = "Unigram"; }), "Unigram");
  add("model_type_number", bpe_json([](json& j) { j["model"]["type"] = 3; }), "type");
  add("vocab_array", bpe_json([](json& j) { j["model"]["vocab"] = json::array(); }), "vocab");
  add("vocab_id_string", bpe_json([](json& j) { j["model"]["vocab"]["hello"] = "x"; }), "vocab");
  add("vocab_id_negative", bpe_json([](json& j) { j["model"]["vocab"]["hello"] = -5; }), "vocab");
  add("vocab_id_huge", bpe_json([](json& j) { j["model"]["vocab"]["hello"] = 4000000000000LL; }), "vocab");
  add("merges_number", bpe_json([](json& j) { j["model"]["merges"] = 5; }), "merges");
  add("merges_unknown_token", bpe_json([](json& j) { j["model"]["merges"].push_back("zzzqqq xxyyww"); }), "merge");
  add("merges_one_part", bpe_json([](json& j) { j["model"]["merges"].push_back("single"); }), "merge");
  add("added_tokens_object", bpe_json([](json& j) { j["added_tokens"] = json::object(); }), "added_tokens");
  add("added_token_no_content", bpe_json([](json& j) { j["added_tokens"].push_back({{"id", 5}}); }), "added_tokens");
  add("added_token_id_huge", bpe_json([](json& j) {
        j["added_tokens"].push_back({{"id", 3000000000LL}, {"content", "<x>"}, {"special", true}});
      }),
      "id");
  add("normalizer_unknown", bpe_json([](json& j) { j["normalizer"] = {{"type", "Bogus"}}; }), "Bogus");
  add("normalizer_deep_sequence", bpe_json([](json& j) {
        json n = {{"type", "Lowercase"}};
        for (int i = 0; i < 30; ++i) n = {{"type", "Sequence"}, {"normalizers", {n}}};
        j["normalizer"] = n;
      }),
      "Sequence");
  accepted();
  add("pre_tokenizer_bad_regex", bpe_json([](json& j) {
        j["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}};
      }),
      "regex");
  add("pre_tokenizer_unknown", bpe_json([](json& j) { j["pre_tokenizer"] = {{"type", "Nope"}}; }), "Nope");
  add("decoder_unknown", bpe_json([](json& j) { j["decoder"] = {{"type", "Nope"}}; }), "Nope");
  add("post_processor_unknown", bpe_json([](json& j) { j["post_processor"] = {{"type", "Nope"}}; }), "Nope");
  add("long_type_name", bpe_json([](json& j) { j["normalizer"] = {{"type", std::string(100000, 'N')}}; }), "bytes)");
  // tokenizer_config.json.
  add("config_not_json", file_text(kBpe, "tokenizer_config.json", "{\"bos_token\": "), "tokenizer_config.json");
  add("config_deep", file_text(kBpe, "tokenizer_config.json", "{\"bos_token\": " + deep_json(70000) + "}"),
      "tokenizer_config.json");
  add("config_is_fifo", replace_file(kBpe, "tokenizer_config.json", [](const fs::path& p) { mkfifo(p.c_str(), 0644); }),
      "tokenizer_config.json");
  add("config_links_dev_zero",
      replace_file(kBpe, "tokenizer_config.json", [](const fs::path& p) { fs::create_symlink("/dev/zero", p); }),
      "tokenizer_config.json");
  add("config_bos_number", bpe_config([](json& j) { j["bos_token"] = 5; }), "bos_token");
  add("config_chat_template_number", bpe_config([](json& j) { j["chat_template"] = 5; }), "chat_template");
  // tiktoken.model.
  add("tiktoken_empty", file_text(kTiktoken, "tiktoken.model", ""), "tiktoken.model");
  add("tiktoken_bad_base64", tiktoken_lines([](std::string& t) { t.insert(0, "!!!notbase64 0\n"); }), "tiktoken.model");
  add("tiktoken_no_rank", tiktoken_lines([](std::string& t) { t.insert(0, "AA==\n"); }), "tiktoken.model");
  add("tiktoken_rank_word", tiktoken_lines([](std::string& t) { t.insert(0, "AA== zero\n"); }), "tiktoken.model");
  add("tiktoken_rank_huge", tiktoken_lines([](std::string& t) { t += "QUJD 99999999999999999999\n"; }),
      "tiktoken.model");
  add("tiktoken_rank_negative", tiktoken_lines([](std::string& t) { t += "QUJD -1\n"; }), "tiktoken.model");
  add("tiktoken_binary", file_text(kTiktoken, "tiktoken.model", std::string("\0\x01\x02\xff\xfe", 5)),
      "tiktoken.model");
  add("tiktoken_is_directory",
      replace_file(kTiktoken, "tiktoken.model", [](const fs::path& p) { fs::create_directory(p); }), "tiktoken.model");
  add("tiktoken_is_fifo", replace_file(kTiktoken, "tiktoken.model", [](const fs::path& p) { mkfifo(p.c_str(), 0644); }),
      "tiktoken.model");
  add("tiktoken_links_dev_zero",
      replace_file(kTiktoken, "tiktoken.model", [](const fs::path& p) { fs::create_symlink("/dev/zero", p); }),
      "tiktoken.model");
  add("tiktoken_config_deep",
      file_text(kTiktoken, "tokenizer_config.json", "{\"added_tokens_decoder\": " + deep_json(70000) + "}"),
      "tokenizer_config.json");
  // No tokenizer at all.
  add(
      "folder_empty", [](const fs::path&) {}, "tokenizer");
  add(
      "folder_missing", [](const fs::path& d) { fs::remove(d / "m"); }, "m");
}

}  // namespace sy::robust
