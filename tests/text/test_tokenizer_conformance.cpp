// Conformance of the tokenizer with Hugging Face tokenizers / transformers / tiktoken over the fixture
// corpus (tests/fixtures/text/, made by tools/text_fixtures/): ids with and without special tokens,
// decode with and without skip_special_tokens, and DecodeStream's pieces, for every corpus line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace sy::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Under the sanitizers the test checks every k-th corpus line only (it is ~20x slower there); the Release
// build checks them all.
#ifdef SY_TOKENIZER_SAMPLE_STEP
constexpr size_t kLineStep = SY_TOKENIZER_SAMPLE_STEP;
#else
constexpr size_t kLineStep = 1;
#endif

const fs::path kFixtures = fs::path(SY_SOURCE_DIR) / "tests/fixtures/text";
const fs::path kShared = fs::path(SY_SOURCE_DIR) / "../shared/data/tokenizers";

std::vector<std::string> read_gz_lines(const fs::path& file) {
  gzFile f = gzopen(file.string().c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + file.string());
  std::vector<std::string> lines;
  std::string line;
  char buf[1 << 16];
  while (gzgets(f, buf, sizeof(buf)) != nullptr) {
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      lines.push_back(std::move(line));
      line.clear();
    }
  }
  if (!line.empty()) lines.push_back(std::move(line));
  gzclose(f);
  return lines;
}

std::string base64_decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// Python's bytes.decode("utf-8", "replace") for the reference text of an invalid-UTF-8 line.
std::string python_replace(const std::string& bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 < 0x80)
      n = 1;
    else if (b0 >= 0xC2 && b0 <= 0xDF)
      n = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF)
      n = 3, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    else if (b0 >= 0xF0 && b0 <= 0xF4)
      n = 4, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    size_t k = 1;
    for (; n > 1 && k < n && i + k < bytes.size(); ++k) {
      const auto b = static_cast<unsigned char>(bytes[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
    }
    if (n > 0 && k == n) {
      out.append(bytes, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += n == 0 ? 1 : k;
    }
  }
  return out;
}

std::string escaped(const std::string& s, size_t limit = 160) {
  std::string out = json(s.substr(0, limit)).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > limit) out += "...";
  return out;
}

template <class T>
std::string show(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size() && i < 40; ++i) {
    if (i > 0) out += ',';
    out += std::to_string(v[i]);
  }
  return out + (v.size() > 40 ? ",...]" : "]");
}

struct Mismatches {
  std::string what;
  size_t count = 0;
  std::vector<std::string> examples;
  void add(size_t line, const std::string& text, const std::string& expected, const std::string& got) {
    if (++count <= 5) {
      examples.push_back(fmt::format("{} line {} text {}\n    expected {}\n    got      {}", what, line, escaped(text),
                                     expected, got));
    }
  }
};

void check_tokenizer(const fs::path& dir, const std::string& name) {
  const std::vector<std::string> corpus = read_gz_lines(kFixtures / "corpus.jsonl.gz");
  const std::vector<std::string> expected = read_gz_lines(kFixtures / (name + ".jsonl.gz"));
  ASSERT_EQ(corpus.size(), expected.size()) << name << ": the fixture and the corpus differ in length";
  const Tokenizer tok = Tokenizer::load(dir);

  Mismatches ids_m{"ids"}, ids_ns_m{"ids_ns"}, dec_m{"dec"}, dec_skip_m{"dec_skip"}, pieces_m{"pieces"}, pcat_m{"pcat"};
  size_t checked = 0;
  for (size_t line = 0; line < corpus.size(); line += kLineStep) {
    const json c = json::parse(corpus[line]);
    const json e = json::parse(expected[line]);
    const std::string input = c.contains("t") ? c["t"].get<std::string>() : base64_decode(c["b"].get<std::string>());
    const std::string text = c.contains("t") ? input : python_replace(input);
    const auto ids = e["ids"].get<std::vector<int32_t>>();
    const auto ids_ns = e.contains("ids_ns") ? e["ids_ns"].get<std::vector<int32_t>>() : ids;
    const std::string dec = e.contains("dec") ? e["dec"].get<std::string>() : text;
    const std::string dec_skip = e.contains("dec_skip") ? e["dec_skip"].get<std::string>() : dec;
    const auto pieces = e["pieces"].get<std::vector<size_t>>();
    const std::string pcat = e.contains("pcat") ? e["pcat"].get<std::string>() : dec;
    ++checked;

    const auto got_ids = tok.encode(input, true);
    if (got_ids != ids) ids_m.add(line, text, show(ids), show(got_ids));
    const auto got_ns = tok.encode(input, false);
    if (got_ns != ids_ns) ids_ns_m.add(line, text, show(ids_ns), show(got_ns));
    const std::string got_dec = tok.decode(ids, false);
    if (got_dec != dec) dec_m.add(line, text, escaped(dec), escaped(got_dec));
    const std::string got_skip = tok.decode(ids, true);
    if (got_skip != dec_skip) dec_skip_m.add(line, text, escaped(dec_skip), escaped(got_skip));

    IncrementalDecoder stream(tok);
    std::vector<size_t> got_pieces;
    std::string got_pcat;
    for (const int32_t id : ids) {
      const std::string piece = stream.push(id);
      got_pieces.push_back(piece.size());
      got_pcat += piece;
    }
    if (got_pieces != pieces) pieces_m.add(line, text, show(pieces), show(got_pieces));
    if (got_pcat != pcat) pcat_m.add(line, text, escaped(pcat), escaped(got_pcat));
  }
  std::string report;
  size_t total = 0;
  for (const Mismatches* m : {&ids_m, &ids_ns_m, &dec_m, &dec_skip_m, &pieces_m, &pcat_m}) {
    total += m->count;
    if (m->count == 0) continue;
    report += fmt::format("\n{} {} mismatches; first ones:", m->count, m->what);
    for (const std::string& ex : m->examples) report += "\n  " + ex;
  }
  std::printf("%s: %zu corpus lines checked (every %zu), %zu mismatches\n", name.c_str(), checked, kLineStep, total);
  EXPECT_EQ(total, 0u) << name << " (" << checked << " lines):" << report;
}

TEST(TokenizerConformance, Qwen3) { check_tokenizer(kShared / "qwen3", "qwen3"); }
TEST(TokenizerConformance, DeepSeekV3) { check_tokenizer(kShared / "deepseek_v3", "deepseek_v3"); }
TEST(TokenizerConformance, MistralLegacy) {
  check_tokenizer(kFixtures / "tokenizers/mistral_legacy", "mistral_legacy");
}
TEST(TokenizerConformance, MistralMetaspace) {
  check_tokenizer(kFixtures / "tokenizers/mistral_metaspace", "mistral_metaspace");
}
TEST(TokenizerConformance, KimiTiktoken) { check_tokenizer(kFixtures / "tokenizers/kimi_tiktoken", "kimi_tiktoken"); }

}  // namespace
}  // namespace sy::text
