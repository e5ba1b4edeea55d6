// Tokenizer unit tests: tiny hand-written tokenizer.json / tiktoken files whose expected ids follow from the
// definitions (BPE merge order, added-token rules, templates), error reporting on bad files, and the
// incremental decoder's pieces against decode().
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "text/tokenizer.h"

namespace sy::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

// A fresh folder per test under the system temp dir.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / (std::string("sy_tok_") + info->test_suite_name() + "_" + info->name() + "_" +
                                         std::to_string(std::random_device{}()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

// Vocabulary a, b, c, ab, bc, abc (ids 0..10 with <unk>, d, e, <s>, </s>) with merges a+b (rank 0), b+c (rank 1), ab+c
// (rank 2); words are split on whitespace (removed).
json tiny_tokenizer() {
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({json{{"id", 9}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                                    json{{"id", 10}, {"content", "</s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}}},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab",
         {{"<unk>", 0},
          {"a", 1},
          {"b", 2},
          {"c", 3},
          {"ab", 4},
          {"bc", 5},
          {"abc", 6},
          {"d", 7},
          {"e", 8},
          {"<s>", 9},
          {"</s>", 10}}},
        {"merges", json::array({"a b", "b c", "ab c"})}}}};
}

Tokenizer load_json(const TempDir& dir, const json& tokenizer, const std::optional<json>& config = std::nullopt) {
  dir.write("tokenizer.json", tokenizer.dump());
  if (config) dir.write("tokenizer_config.json", config->dump());
  return Tokenizer::load(dir.path());
}

TEST(Tokenizer, BpeMergesLowestRankFirst) {
  TempDir dir;
  const Tokenizer tok = load_json(dir, tiny_tokenizer());
  EXPECT_EQ(tok.encode("abc"), (Ids{6}));      // a+b, then ab+c
  EXPECT_EQ(tok.encode("bcab"), (Ids{5, 4}));  // a+b (rank 0) before b+c (rank 1); bc+ab has no merge
  EXPECT_EQ(tok.encode("cab"), (Ids{3, 4}));
  EXPECT_EQ(tok.encode("abc  ab\tc"), (Ids{6, 4, 3}));
  EXPECT_EQ(tok.vocab_size(), 11);
  EXPECT_EQ(tok.token_id("abc"), 6);
  EXPECT_EQ(tok.token_id("zz"), std::nullopt);
  EXPECT_EQ(tok.token_text(5), "bc");
}

TEST(Tokenizer, MergesAsPairs) {
  TempDir dir;
  json t = tiny_tokenizer();
  t["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"b", "c"}), json::array({"ab", "c"})});
  const Tokenizer tok = load_json(dir, t);
  EXPECT_EQ(tok.encode("bcab"), (Ids{5, 4}));
  EXPECT_EQ(tok.encode("abc"), (Ids{6}));
}

TEST(Tokenizer, UnknownCharactersAndFuseUnk) {
  TempDir dir;
  json t = tiny_tokenizer();
  EXPECT_EQ(load_json(dir, t).encode("axyb"), (Ids{1, 0, 0, 2}));
  t["model"]["fuse_unk"] = true;
  EXPECT_EQ(load_json(dir, t).encode("axyb"), (Ids{1, 0, 2}));
}

TEST(Tokenizer, ByteFallbackAndItsDecoder) {
  TempDir dir;
  json t = tiny_tokenizer();
  t["model"]["byte_fallback"] = true;
  t["model"]["vocab"]["<0xC3>"] = 11;
  t["model"]["vocab"]["<0xA9>"] = 12;
  t["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
  const Tokenizer tok = load_json(dir, t);
  EXPECT_EQ(tok.encode("a\u00e9"), (Ids{1, 11, 12}));  // é = C3 A9
  EXPECT_EQ(tok.decode(Ids{1, 11, 12}), "a\u00e9");
  EXPECT_EQ(tok.decode(Ids{11, 1}),
            "\xEF\xBF\xBD"
            "a");  // a lone lead byte is one U+FFFD per byte
}

TEST(Tokenizer, AddedTokensAndTemplate) {
  TempDir dir;
  json t = tiny_tokenizer();
  t["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                                 {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
                         {"pair", json::array()},
                         {"special_tokens",
                          {{"<s>", {{"id", "<s>"}, {"ids", {9}}, {"tokens", {"<s>"}}}},
                           {"</s>", {{"id", "</s>"}, {"ids", {10}}, {"tokens", {"</s>"}}}}}}};
  const Tokenizer tok = load_json(dir, t);
  EXPECT_EQ(tok.encode("ab<s>c", false), (Ids{4, 9, 3}));
  EXPECT_EQ(tok.encode("ab<s>c", true), (Ids{9, 4, 9, 3, 10}));
  EXPECT_EQ(tok.encode("", true), (Ids{9, 10}));
  EXPECT_TRUE(tok.is_special(9));
  EXPECT_FALSE(tok.is_special(4));
  // No decoder: tokens joined with spaces; specials dropped when asked.
  EXPECT_EQ(tok.decode(Ids{9, 4, 3, 10}), "<s> ab c </s>");
  EXPECT_EQ(tok.decode(Ids{9, 4, 3, 10}, true), "ab c");
  // An id without a token (a model's padded vocabulary rows) decodes to nothing, as `tokenizers` drops
  // it (Tokenizer.decode and DecodeStream.step give '' / None for it).
  EXPECT_EQ(tok.decode(Ids{11}), "");
  EXPECT_EQ(tok.decode(Ids{4, 11, 3}), "ab c");
  IncrementalDecoder stream(tok);
  EXPECT_EQ(stream.push(4), "ab");
  EXPECT_EQ(stream.push(11), "");
  EXPECT_EQ(stream.push(-1), "");
  EXPECT_EQ(stream.push(3), " c");
}

TEST(Tokenizer, AddedTokenRules) {
  TempDir dir;
  json t = tiny_tokenizer();
  t["added_tokens"] = json::array({
      json{{"id", 11}, {"content", "<x>"}, {"special", false}, {"normalized", false}, {"lstrip", true}},
      json{{"id", 12}, {"content", "<x>y"}, {"special", false}, {"normalized", false}},
      json{{"id", 13}, {"content", "cab"}, {"special", false}, {"normalized", false}, {"single_word", true}},
      json{{"id", 14}, {"content", "<r>"}, {"special", false}, {"normalized", false}, {"rstrip", true}},
  });
  const Tokenizer tok = load_json(dir, t);
  EXPECT_EQ(tok.encode("a<x>yb"), (Ids{1, 12, 2}));   // the longest match at a position wins
  EXPECT_EQ(tok.encode("a  <x>b"), (Ids{1, 11, 2}));  // lstrip takes the spaces before
  EXPECT_EQ(tok.encode("a<r>  b"), (Ids{1, 14, 2}));  // rstrip the ones after
  EXPECT_EQ(tok.encode("a cab b"), (Ids{1, 13, 2}));  // a single word
  EXPECT_EQ(tok.encode("acab"), (Ids{1, 3, 4}));      // inside a word: not the added token
}

// As `tokenizers` re-adds them: an added token whose content is in the vocabulary takes that id, a new one
// the next id after the vocabulary's, whatever the file says.
TEST(Tokenizer, AddedTokenIdsAsTokenizersAssignsThem) {
  TempDir dir;
  json t = tiny_tokenizer();
  t["added_tokens"] = json::array({json{{"id", 50}, {"content", "bc"}, {"special", true}, {"normalized", false}},
                                   json{{"id", 60}, {"content", "<new>"}, {"special", false}, {"normalized", false}}});
  const Tokenizer tok = load_json(dir, t);
  EXPECT_EQ(tok.encode("abc<new>"), (Ids{1, 5, 11}));
  EXPECT_EQ(tok.vocab_size(), 12);
  EXPECT_TRUE(tok.is_special(5));
}

TEST(Tokenizer, NormalizerAndMetaspace) {
  TempDir dir;
  json t = tiny_tokenizer();
  t["model"]["vocab"]["\u2581"] = 11;
  t["model"]["vocab"]["\u2581a"] = 12;
  t["model"]["merges"].push_back("\u2581 a");
  t["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFKC"}}, {{"type", "Lowercase"}}})}};
  t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}};
  t["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}};
  const Tokenizer tok = load_json(dir, t);
  // NFKC maps the fullwidth Ａ to A, Lowercase to a; "first" prepends ▁ only at the start of the input;
  // in "▁ab" a+b (rank 0) merges before ▁+a (rank 3).
  EXPECT_EQ(tok.encode("\uff21b a"), (Ids{11, 4, 12}));
  EXPECT_EQ(tok.encode("<s>ab", false), (Ids{9, 4}));
  // The first token's ▁ is dropped, the others become spaces.
  EXPECT_EQ(tok.decode(Ids{11, 4, 12}), "ab a");
  EXPECT_EQ(tok.decode(Ids{4, 12, 11}), "ab a ");
}

TEST(Tokenizer, InvalidUtf8IsReplacedFirst) {
  TempDir dir;
  const Tokenizer tok = load_json(dir, tiny_tokenizer());
  // One U+FFFD per maximal invalid subpart, as Python's decode("utf-8", "replace").
  EXPECT_EQ(tok.encode("a\xff\xe2\x82"
                       "b"),
            tok.encode("a\uFFFD\uFFFD"
                       "b"));
  EXPECT_EQ(tok.encode("a\xe2\x82"
                       "b"),
            tok.encode("a\uFFFD"
                       "b"));
}

TEST(Tokenizer, Tiktoken) {
  TempDir dir;
  // Ranks: the 256 bytes, then "bc" (256), "ab" (257), "xyz" (258).
  std::string model;
  auto b64 = [](const std::string& s) {
    static const char* chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < s.size(); i += 3) {
      uint32_t n = uint32_t(uint8_t(s[i])) << 16;
      if (i + 1 < s.size()) n |= uint32_t(uint8_t(s[i + 1])) << 8;
      if (i + 2 < s.size()) n |= uint8_t(s[i + 2]);
      out += chars[n >> 18];
      out += chars[(n >> 12) & 63];
      out += i + 1 < s.size() ? chars[(n >> 6) & 63] : '=';
      out += i + 2 < s.size() ? chars[n & 63] : '=';
    }
    return out;
  };
  for (int b = 0; b < 256; ++b) model += b64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  model += b64("bc") + " 256\n" + b64("ab") + " 257\n" + b64("xyz") + " 258\n";
  dir.write("tiktoken.model", model);
  dir.write("tokenizer_config.json",
            json{{"added_tokens_decoder", {{"259", {{"content", "[BOS]"}, {"special", true}}}}}}.dump());
  const Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.encode("abc"), (Ids{'a', 256}));  // bc (rank 256) before ab (257)
  EXPECT_EQ(tok.encode("xyz"), (Ids{258}));       // a piece that is a token is taken whole
  EXPECT_EQ(tok.encode("x[BOS]y"), (Ids{'x', 259, 'y'}));
  // tokenization_kimi.py encodes runs of more than 25,000 non-space characters in parts: "b" + "ab" * 12500
  // is cut after 25,000 characters, between an "a" and its "b".
  std::string run = "b";
  for (int i = 0; i < 12500; ++i) run += "ab";
  Ids expected{'b'};
  expected.insert(expected.end(), 12499, 257);
  expected.push_back('a');
  expected.push_back('b');
  EXPECT_EQ(tok.encode(run), expected);
  EXPECT_EQ(tok.decode(Ids{257, 259, 'c'}), "ab[BOS]c");
  EXPECT_EQ(tok.decode(Ids{257, 259, 'c'}, true), "abc");
  EXPECT_EQ(tok.vocab_size(), 259 + 256);  // 256 reserved special ids follow the ranks
  EXPECT_EQ(tok.token_text(260), "<|reserved_token_260|>");
}

// Loading `dir` throws sy::Error whose message contains each of `parts`.
void expect_load_error(const fs::path& dir, const std::vector<std::string>& parts) {
  try {
    Tokenizer::load(dir);
    ADD_FAILURE() << "no error loading " << dir;
  } catch (const sy::Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  TempDir dir;
  expect_load_error(dir.path() / "nope", {"nope", "not a directory"});
  expect_load_error(dir.path(), {"no tokenizer.json and no tiktoken.model"});

  const std::string full = tiny_tokenizer().dump();
  dir.write("tokenizer.json", full.substr(0, full.size() / 2));
  expect_load_error(dir.path(), {"tokenizer.json", "not valid JSON"});

  json t = tiny_tokenizer();
  t["model"]["merges"].push_back("a zz");
  dir.write("tokenizer.json", t.dump());
  expect_load_error(dir.path(), {"tokenizer.json", "merge 3", "\"zz\"", "not in model.vocab"});

  t = tiny_tokenizer();
  t["model"]["vocab"]["f"] = 3;
  dir.write("tokenizer.json", t.dump());
  expect_load_error(dir.path(), {"tokenizer.json", "id 3", "unique"});

  t = tiny_tokenizer();
  t["model"]["vocab"]["f"] = int64_t(1) << 40;
  dir.write("tokenizer.json", t.dump());
  expect_load_error(dir.path(), {"tokenizer.json", "model.vocab[\"f\"]", "integer id in [0,"});

  t = tiny_tokenizer();
  t["normalizer"] = {{"type", "BertNormalizer"}};
  dir.write("tokenizer.json", t.dump());
  expect_load_error(dir.path(), {"tokenizer.json", "normalizer", "\"BertNormalizer\"", "not supported"});

  t = tiny_tokenizer();
  t["model"]["type"] = "Unigram";
  dir.write("tokenizer.json", t.dump());
  expect_load_error(dir.path(), {"tokenizer.json", "\"Unigram\""});

  t = tiny_tokenizer();
  t["added_tokens"][0]["id"] = "nine";
  dir.write("tokenizer.json", t.dump());
  expect_load_error(dir.path(), {"tokenizer.json", "added_tokens[0]", "\"id\" must be an integer"});

  t = tiny_tokenizer();
  dir.write("tokenizer.json", t.dump());
  dir.write("tokenizer_config.json", "{\"add_bos_token\": tru");
  expect_load_error(dir.path(), {"tokenizer_config.json", "not valid JSON"});
}

TEST(Tokenizer, TiktokenLoadErrors) {
  TempDir dir;
  dir.write("tiktoken.model", "YQ== 0\n");
  expect_load_error(dir.path(), {"tokenizer_config.json", "missing"});
  dir.write("tokenizer_config.json", "{}");
  dir.write("tiktoken.model", "YQ== 0\n!!!! 1\n");
  expect_load_error(dir.path(), {"tiktoken.model:2", "base64"});
  dir.write("tiktoken.model", "YQ== 0\nYg== x1\n");
  expect_load_error(dir.path(), {"tiktoken.model:2", "rank"});
  dir.write("tiktoken.model", "YQ== 0\nYg== 0\n");
  expect_load_error(dir.path(), {"tiktoken.model:2", "rank 0"});
  dir.write("tiktoken.model", "YQ== 0\nYg== 1\n");
  expect_load_error(dir.path(), {"tiktoken.model", "byte 0x00 has no rank"});
}

// The incremental pieces add up to decode() whenever the text does not end inside a character.
TEST(Tokenizer, IncrementalPiecesConcatenateToDecode) {
  const fs::path dir = fs::path(SY_SOURCE_DIR) / "../shared/data/tokenizers/qwen3";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const Tokenizer tok = Tokenizer::load(dir);
  std::mt19937 rng(12);
  const int32_t end_marker = *tok.token_id("a");
  for (int trial = 0; trial < 200; ++trial) {
    Ids ids(1 + rng() % 40);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % tok.vocab_size());
    ids.push_back(end_marker);
    for (const bool skip : {false, true}) {
      IncrementalDecoder stream(tok, skip);
      std::string joined;
      for (const int32_t id : ids) joined += stream.push(id);
      EXPECT_EQ(joined, tok.decode(ids, skip)) << "trial " << trial;
    }
  }
}

// encode is const and may be called from several threads at once (its word cache is shared).
TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  const fs::path dir = fs::path(SY_SOURCE_DIR) / "../shared/data/tokenizers/qwen3";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " is absent";
  const Tokenizer tok = Tokenizer::load(dir);
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    texts.push_back("line " + std::to_string(i) + ": the quick brown fox " + std::string(size_t(i % 7), ' ') +
                    "jumps over \u6771\u4eac " + std::to_string(i * 7919) + "<|im_end|>");
  }
  std::vector<Ids> serial;
  for (const std::string& t : texts) serial.push_back(tok.encode(t));
  std::vector<std::vector<Ids>> results(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < results.size(); ++k) {
    threads.emplace_back([&, k] {
      for (size_t i = 0; i < texts.size(); ++i) results[k].push_back(tok.encode(texts[(i + k * 97) % texts.size()]));
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t k = 0; k < results.size(); ++k) {
    for (size_t i = 0; i < texts.size(); ++i) ASSERT_EQ(results[k][i], serial[(i + k * 97) % texts.size()]);
  }
}

}  // namespace
}  // namespace sy::text
