// `switchyard bench tokenize`: the model folder's tokenizer load time and its encoding throughput on one
// core over a corpus (the conformance corpus, .jsonl or .jsonl.gz of {"t": text} lines, or any text
// file, one string per line), in the JSON line that bench/tokenize_peer.py prints for Python `tokenizers`.
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "base/check.h"
#include "text/tokenizer.h"

namespace sy {

namespace {

struct BenchTokenizeOptions {
  std::string model;
  std::string corpus;
  int repeat = 5;
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Every line of a plain or gzip-compressed file (zlib reads both).
std::vector<std::string> read_lines(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  SY_CHECK(f != nullptr, "--corpus {}: cannot open it", path);
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
  int err = 0;
  const char* msg = gzerror(f, &err);
  const std::string what = msg != nullptr ? msg : "";
  gzclose(f);
  SY_CHECK(err == Z_OK || err == Z_STREAM_END, "--corpus {}: read error: {}", path, what);
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

// The strings to encode: the "t" field of each JSON line of a .jsonl corpus (invalid-UTF-8 "b" lines are
// left out, as the Python peer cannot take them), or every line of another file.
std::vector<std::string> read_corpus(const std::string& path) {
  std::vector<std::string> lines = read_lines(path);
  if (!ends_with(path, ".jsonl") && !ends_with(path, ".jsonl.gz")) return lines;
  std::vector<std::string> texts;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto j = nlohmann::json::parse(lines[i], nullptr, false);
    SY_CHECK(!j.is_discarded() && j.is_object(), "--corpus {}: line {} is not a JSON object", path, i + 1);
    if (j.contains("t") && j["t"].is_string()) texts.push_back(j["t"].get<std::string>());
  }
  return texts;
}

int run_bench_tokenize(const BenchTokenizeOptions& o) {
  const std::vector<std::string> corpus = read_corpus(o.corpus);
  SY_CHECK(!corpus.empty(), "--corpus {}: no strings in it", o.corpus);
  size_t bytes = 0;
  for (const auto& s : corpus) bytes += s.size();

  using clock = std::chrono::steady_clock;
  const auto l0 = clock::now();
  const text::Tokenizer tokenizer = text::Tokenizer::load(o.model);
  const double load_ms = std::chrono::duration<double, std::milli>(clock::now() - l0).count();

  std::vector<double> seconds;
  size_t tokens = 0;
  for (int r = 0; r < o.repeat + 1; ++r) {  // the first pass warms caches and is not counted
    tokens = 0;
    const auto t0 = clock::now();
    for (const auto& s : corpus) tokens += tokenizer.encode(s).size();
    const double t = std::chrono::duration<double>(clock::now() - t0).count();
    if (r > 0) seconds.push_back(t);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const nlohmann::ordered_json line = {{"tokenizer", o.model}, {"engine", "switchyard"},
                                       {"mode", "encode"},     {"strings", corpus.size()},
                                       {"bytes", bytes},       {"tokens", tokens},
                                       {"seconds", median},    {"mb_per_s", static_cast<double>(bytes) / median / 1e6},
                                       {"load_ms", load_ms},   {"repeat", o.repeat}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace

CommandMain add_bench_tokenize_command(CLI::App& bench_cmd) {
  auto o = std::make_shared<BenchTokenizeOptions>();
  CLI::App* cmd = bench_cmd.add_subcommand("tokenize", "tokenizer load time and encoding MB/s on one core");
  cmd->add_option("--model", o->model, "model folder with tokenizer.json or tiktoken.model")->required();
  cmd->add_option("--corpus", o->corpus, ".jsonl(.gz) of {\"t\": text} lines, or a text file (one string a line)")
      ->required();
  cmd->add_option("--repeat", o->repeat, "timed passes over the corpus (median reported)")->check(CLI::Range(1, 1000));
  return [o] { return run_bench_tokenize(*o); };
}

}  // namespace sy
