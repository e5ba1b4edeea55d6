// Random and ShareGPT prompts; the only tokenizer is the server's, over HTTP.
#include "bench_client/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "base/check.h"

namespace sy::bench {

using nlohmann::json;

std::vector<int64_t> RemoteTokenizer::encode(const std::string& text) {
  const json r = session_.post_json("/tokenize", {{"prompt", text}, {"add_special_tokens", false}});
  SY_CHECK(r.contains("tokens") && r["tokens"].is_array(), "POST {}/tokenize: no \"tokens\" list in {}",
           session_.url().str(), r.dump().substr(0, 200));
  return r["tokens"].get<std::vector<int64_t>>();
}

std::string RemoteTokenizer::decode(const std::vector<int64_t>& ids) {
  const json r = session_.post_json("/detokenize", {{"tokens", ids}});
  SY_CHECK(r.contains("prompt") && r["prompt"].is_string(), "POST {}/detokenize: no \"prompt\" text in {}",
           session_.url().str(), r.dump().substr(0, 200));
  return r["prompt"].get<std::string>();
}

namespace {

struct Lengths {
  std::vector<int64_t> input;
  std::vector<int64_t> output;
};

Lengths draw_lengths(const RandomDatasetSpec& s, std::mt19937_64& rng) {
  SY_CHECK(s.num_prompts > 0 && s.input_len > 0 && s.output_len > 0,
           "random dataset: --num-prompts {}, --random-input-len {} and --random-output-len {} must be positive",
           s.num_prompts, s.input_len, s.output_len);
  SY_CHECK(s.range_ratio >= 0.0 && s.range_ratio <= 1.0, "--random-range-ratio {}: expected a value in [0, 1]",
           s.range_ratio);
  SY_CHECK(s.vocab_size > 0, "--random-vocab-size {}: must be positive", s.vocab_size);
  SY_CHECK(s.shared_prefix_len >= 0 && s.num_groups >= 1 && s.num_groups <= s.num_prompts,
           "--shared-prefix-len {} and --num-groups {}: the length must be >= 0 and the groups between 1 and "
           "--num-prompts ({})",
           s.shared_prefix_len, s.num_groups, s.num_prompts);
  auto lowest = [&](int64_t len) {
    return std::max<int64_t>(1, static_cast<int64_t>(std::floor(len * s.range_ratio)));
  };
  std::uniform_int_distribution<int64_t> in(lowest(s.input_len), s.input_len);
  std::uniform_int_distribution<int64_t> out(lowest(s.output_len), s.output_len);
  Lengths l;
  for (int64_t i = 0; i < s.num_prompts; ++i) {
    l.input.push_back(in(rng));
    l.output.push_back(out(rng));
  }
  return l;
}

std::vector<int64_t> random_ids(int64_t n, int64_t vocab_size, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> id(0, vocab_size - 1);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = id(rng);
  return ids;
}

}  // namespace

namespace {
// The groups' shared prefixes (none without --shared-prefix-len), drawn after the lengths.
std::vector<std::vector<int64_t>> group_prefixes(const RandomDatasetSpec& s, std::mt19937_64& rng) {
  std::vector<std::vector<int64_t>> out;
  if (s.shared_prefix_len == 0) return out;
  for (int64_t g = 0; g < s.num_groups; ++g) out.push_back(random_ids(s.shared_prefix_len, s.vocab_size, rng));
  return out;
}
}  // namespace

std::vector<PromptRow> make_random_id_prompts(const RandomDatasetSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  const Lengths l = draw_lengths(spec, rng);
  const std::vector<std::vector<int64_t>> prefixes = group_prefixes(spec, rng);
  std::vector<PromptRow> rows;
  for (size_t i = 0; i < l.input.size(); ++i) {
    std::vector<int64_t> ids = random_ids(l.input[i], spec.vocab_size, rng);
    if (!prefixes.empty()) {
      const auto& p = prefixes[i % prefixes.size()];
      ids.insert(ids.begin(), p.begin(), p.end());
    }
    const auto len = static_cast<int64_t>(ids.size());
    rows.push_back({.prompt = std::move(ids), .prompt_len = len, .output_len = l.output[i]});
  }
  return rows;
}

std::vector<PromptRow> make_random_text_prompts(const RandomDatasetSpec& spec, RemoteTokenizer& tokenizer) {
  std::mt19937_64 rng(spec.seed);
  const Lengths l = draw_lengths(spec, rng);
  std::vector<std::string> prefixes;
  for (const auto& ids : group_prefixes(spec, rng)) prefixes.push_back(tokenizer.decode(ids));
  std::vector<PromptRow> rows;
  for (size_t i = 0; i < l.input.size(); ++i) {
    const auto want = static_cast<size_t>(l.input[i]);
    std::vector<int64_t> ids = random_ids(l.input[i], spec.vocab_size, rng);
    std::string text = tokenizer.decode(ids);
    std::vector<int64_t> got = tokenizer.encode(text);
    // Decoding then encoding merges or splits tokens; a few rounds of trimming to the encoded ids (or
    // topping them up) settle on a text of the drawn length.
    for (int round = 0; round < 4 && got.size() != want; ++round) {
      ids = got;
      if (ids.size() > want) {
        ids.resize(want);
      } else {
        const std::vector<int64_t> more = random_ids(static_cast<int64_t>(want - ids.size()), spec.vocab_size, rng);
        ids.insert(ids.end(), more.begin(), more.end());
      }
      text = tokenizer.decode(ids);
      got = tokenizer.encode(text);
    }
    int64_t len = static_cast<int64_t>(got.size());
    if (!prefixes.empty()) {
      text.insert(0, prefixes[i % prefixes.size()]);
      len = static_cast<int64_t>(tokenizer.encode(text).size());
    }
    rows.push_back({.prompt = std::move(text), .prompt_len = len, .output_len = l.output[i]});
  }
  return rows;
}

std::vector<PromptRow> read_sharegpt_prompts(const SharegptSpec& spec, RemoteTokenizer& tokenizer) {
  std::ifstream in(spec.path);
  SY_CHECK(in.good(), "--dataset sharegpt {}: cannot open it", spec.path);
  const json data = json::parse(in, nullptr, false);
  SY_CHECK(!data.is_discarded() && data.is_array(), "--dataset sharegpt {}: expected a JSON list of conversations",
           spec.path);
  // The first two turns of each conversation that has them.
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const json& item : data) {
    if (!item.is_object()) continue;
    const json* turns = item.contains("conversations")  ? &item["conversations"]
                        : item.contains("conversation") ? &item["conversation"]
                                                        : nullptr;
    if (turns == nullptr || !turns->is_array() || turns->size() < 2) continue;
    const json& a = (*turns)[0];
    const json& b = (*turns)[1];
    if (!a.is_object() || !b.is_object() || !a.contains("value") || !b.contains("value") || !a["value"].is_string() ||
        !b["value"].is_string()) {
      continue;
    }
    pairs.emplace_back(a["value"].get<std::string>(), b["value"].get<std::string>());
  }
  std::mt19937_64 rng(spec.seed);
  std::shuffle(pairs.begin(), pairs.end(), rng);
  std::vector<PromptRow> rows;
  for (const auto& [prompt, completion] : pairs) {
    if (static_cast<int64_t>(rows.size()) == spec.num_prompts) break;
    const auto prompt_len = static_cast<int64_t>(tokenizer.encode(prompt).size());
    const int64_t output_len =
        spec.output_len ? *spec.output_len : static_cast<int64_t>(tokenizer.encode(completion).size());
    if (prompt_len < 2 || output_len < 2) continue;
    if (spec.max_model_len > 0 && prompt_len + output_len > spec.max_model_len) continue;
    rows.push_back({.prompt = prompt, .prompt_len = prompt_len, .output_len = output_len});
  }
  SY_CHECK(static_cast<int64_t>(rows.size()) == spec.num_prompts,
           "--dataset sharegpt {}: {} usable conversations of {} with two turns, --num-prompts asks for {}", spec.path,
           rows.size(), pairs.size(), spec.num_prompts);
  return rows;
}

}  // namespace sy::bench
