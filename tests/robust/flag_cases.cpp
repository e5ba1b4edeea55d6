// Bad command-line flags of generate, plan, inspect and tokenize over good inputs: out of range, not
// numbers, NaN and infinities, sizes that overflow, paths that are not what they must be, machine files
// broken as config files are.
#include <sys/stat.h>

#include "robust/robust_case.h"

namespace sy::robust {

namespace fs = std::filesystem;

namespace {

using Setup = std::function<void(const fs::path&)>;

void model(const fs::path& d) { copy_fixture("qwen3_moe_base", d / "m"); }

Setup model_and_file(const std::string& name, std::string text) {
  return [name, text = std::move(text)](const fs::path& d) {
    model(d);
    write_file(d / name, text);
  };
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

void add_flag_cases(std::vector<Case>& out) {
  const auto add = [&out](const std::string& name, Setup setup, std::vector<std::string> args,
                          const std::string& expect) {
    out.push_back({.name = "flag_" + name, .setup = std::move(setup), .args = std::move(args), .expect = expect});
  };
  const auto plan = [&](const std::string& name, const std::vector<std::string>& extra, const std::string& expect) {
    add("plan_" + name, model, plus(plan_args(), extra), expect);
  };
  const auto gen = [&](const std::string& name, const std::vector<std::string>& extra, const std::string& expect) {
    add("generate_" + name, model, plus({"generate", "--model", "{d}/m", "--max-tokens", "2"}, extra), expect);
  };

  // plan: GPUs, nodes and layout sizes.
  plan("gpus_zero", {"--gpus", "0"}, "--gpus");
  plan("gpus_negative", {"--gpus", "-8"}, "--gpus");
  plan("gpus_million", {"--gpus", "1000000"}, "not in range 1 to 65536");
  plan("gpus_int_overflow", {"--gpus", "99999999999999999999"}, "--gpus");
  plan("gpus_word", {"--gpus", "eight"}, "--gpus");
  add("plan_gpus_many_divisors", model,
      {"plan", "--model", "{d}/m", "--machine", "h200", "--gpus", "2520", "--nodes", "315"}, "too many to rank");
  plan("nodes_zero", {"--nodes", "0"}, "--nodes");
  add("plan_nodes_uneven", model, {"plan", "--model", "{d}/m", "--machine", "h200", "--gpus", "9", "--nodes", "2"},
      "does not spread evenly");
  plan("tp_zero", {"--tp", "0"}, "--tp");
  plan("tp_2e9", {"--tp", "2000000000"}, "not in range 1 to 1024");
  // A layout that breaks rules is reported rule by rule, one line each, with alternatives (design.md).
  out.push_back({.name = "flag_plan_tp_dp_pp_product",
                 .setup = model,
                 .args = plus(plan_args(), {"--tp", "1024", "--dp", "1024", "--pp", "1024"}),
                 .expect = "pp 1024 exceeds the 4 decoder layers",
                 .lines = 0});
  plan("ep_negative", {"--ep", "-2"}, "--ep");
  plan("etp_float", {"--etp", "1.5"}, "--etp");
  plan("edp_nan", {"--edp", "nan"}, "--edp");
  plan("dense_tp_huge", {"--dense-tp", "4096"}, "not in range 1 to 1024");
  plan("pp_layers_words", {"--pp-layers", "a,b"}, "--pp-layers: 'a' is not a layer count");
  plan("pp_layers_negative", {"--pp-layers", "-1,5"}, "--pp-layers: '-1' is not a layer count");
  plan("pp_layers_huge", {"--pp-layers", "99999999999,1"}, "is not a layer count");
  plan("pp_layers_empty_item", {"--pp-layers", "2,,2"}, "is not a layer count");
  plan("redundant_experts_int64_max", {"--redundant-experts", "9223372036854775807"}, "--redundant-experts");
  plan("redundant_experts_negative", {"--redundant-experts", "-1"}, "--redundant-experts");
  plan("fixed_gb_nan", {"--fixed-gb", "nan"}, "'nan' is not a finite number");
  plan("fixed_gb_inf", {"--fixed-gb", "inf"}, "'inf' is not a finite number");
  plan("fixed_gb_negative", {"--fixed-gb", "-1"}, "--fixed-gb");
  plan("fixed_gb_huge", {"--fixed-gb", "1e300"}, "--fixed-gb");
  plan("fixed_gb_word", {"--fixed-gb", "two"}, "'two' is not a number");
  plan("max_batch_tokens_zero", {"--max-batch-tokens", "0"}, "--max-batch-tokens");
  plan("max_batch_tokens_huge", {"--max-batch-tokens", "1000000000000"}, "--max-batch-tokens");
  plan("max_seqs_zero", {"--max-seqs", "0"}, "--max-seqs");
  plan("min_kv_tokens_negative", {"--min-kv-tokens", "-5"}, "--min-kv-tokens");
  plan("min_kv_tokens_int64_max", {"--min-kv-tokens", "9223372036854775807"}, "--min-kv-tokens");
  plan("kv_dtype_int4", {"--kv-dtype", "int4"}, "--kv-dtype 'int4' is not one of");
  plan("batch_zero", {"--batch", "0"}, "--batch");
  plan("context_negative", {"--context", "-1"}, "--context");
  plan("unknown_flag", {"--bogus"}, "--bogus");
  add("plan_machine_unknown", model, {"plan", "--model", "{d}/m", "--machine", "z900"},
      "--machine 'z900' is neither a preset");
  add("plan_machine_long_name", model, {"plan", "--model", "{d}/m", "--machine", std::string(5000, 'm')},
      "… (5000 bytes)");
  add("plan_no_machine", model, {"plan", "--model", "{d}/m"}, "--machine is required");
  add("plan_model_missing", model, {"plan", "--model", "{d}/nothing", "--machine", "h200"}, "config.json");
  add("plan_model_is_file", model, {"plan", "--model", "{d}/m/config.json", "--machine", "h200"}, "config.json");
  add("plan_model_dev_null", {}, {"plan", "--model", "/dev/null", "--machine", "h200"}, "config.json");

  // plan: machine files.
  const auto machine = [&](const std::string& name, const std::string& text, const std::string& expect) {
    add("plan_machine_" + name, model_and_file("machine.json", text),
        {"plan", "--model", "{d}/m", "--machine", "{d}/machine.json"}, expect);
  };
  const std::string good_machine_head = R"({"base": "h200", )";
  machine("not_json", "{", "is not valid JSON");
  machine("deep", "{\"base\": " + deep_json(70000) + "}", "nested deeper than 64");
  machine("number_1e400", good_machine_head + R"("memory_gb": 1e400})", "number overflow");
  machine("gpus_per_node_1e12", good_machine_head + R"("gpus_per_node": 1e12})",
          "'gpus_per_node' is 1000000000000, outside the range");
  machine("gpus_per_node_2000", good_machine_head + R"("gpus_per_node": 2000})",
          "gpus_per_node is 2000, outside [1, 1024]");
  machine("gpus_per_node_zero", good_machine_head + R"("gpus_per_node": 0})", "gpus_per_node is 0");
  machine("memory_negative", good_machine_head + R"("memory_gb": -80})", "'memory_gb' is -80, outside the range");
  machine("memory_string", good_machine_head + R"("memory_gb": "80"})", "'memory_gb' must be a number");
  machine("socket_huge", good_machine_head + R"("gpu_socket": [0,0,0,0,0,0,0,99999999999]})", "'gpu_socket' entries");
  machine("unknown_key", good_machine_head + R"("colour": "green"})", "unknown key 'colour'");
  machine("base_unknown", R"({"base": "h9000"})", "base 'h9000' is not a preset");
  add(
      "plan_machine_fifo",
      [](const fs::path& d) {
        model(d);
        mkfifo((d / "machine.json").c_str(), 0644);
      },
      {"plan", "--model", "{d}/m", "--machine", "{d}/machine.json"}, "it is a FIFO");
  add("plan_machine_dev_zero", model, {"plan", "--model", "{d}/m", "--machine", "/dev/zero"},
      "it is a character device");
  add("plan_machine_directory", model, {"plan", "--model", "{d}/m", "--machine", "{d}/m"}, "it is a directory");

  // generate.
  gen("max_tokens_zero", {"--prompt-ids", "1,2", "--max-tokens", "0"}, "--max-tokens");
  gen("max_tokens_huge", {"--prompt-ids", "1,2", "--max-tokens", "99999999999"}, "--max-tokens");
  gen("temperature_nan", {"--prompt-ids", "1,2", "--temperature", "nan"}, "'nan' is not a finite number");
  gen("temperature_inf", {"--prompt-ids", "1,2", "--temperature", "inf"}, "'inf' is not a finite number");
  gen("temperature_negative", {"--prompt-ids", "1,2", "--temperature", "-1"}, "--temperature");
  gen("top_p_nan", {"--prompt-ids", "1,2", "--top-p", "nan"}, "'nan' is not a finite number");
  gen("top_p_two", {"--prompt-ids", "1,2", "--top-p", "2"}, "--top-p");
  gen("top_k_negative", {"--prompt-ids", "1,2", "--top-k", "-1"}, "--top-k");
  gen("kv_dtype_fp4", {"--prompt-ids", "1,2", "--kv-dtype", "fp4"}, "--kv-dtype 'fp4' is not one of auto, bf16, fp8");
  gen("kv_dtype_empty", {"--prompt-ids", "1,2", "--kv-dtype", ""}, "--kv-dtype '' is not one of auto, bf16, fp8");
  gen("top_k_huge", {"--prompt-ids", "1,2", "--top-k", "9223372036854775807"}, "--top-k");
  gen("block_size_zero", {"--prompt-ids", "1,2", "--block-size", "0"}, "--block-size");
  gen("max_batch_tokens_zero", {"--prompt-ids", "1,2", "--max-batch-tokens", "0"}, "--max-batch-tokens");
  gen("layers_zero", {"--prompt-ids", "1,2", "--layers", "0"}, "--layers");
  gen("layers_negative", {"--prompt-ids", "1,2", "--layers", "-3"}, "--layers");
  gen("prompt_ids_words", {"--prompt-ids", "a,b"}, "--prompt-ids");
  gen("prompt_ids_empty", {"--prompt-ids", ""}, "--prompt-ids");
  gen("prompt_ids_negative", {"--prompt-ids", "-5"}, "-5");
  gen("prompt_ids_over_vocab", {"--prompt-ids", "1,384"}, "384");
  gen("prompt_ids_huge", {"--prompt-ids", "99999999999999999999"}, "99999999999999999999");
  gen("prompt_ids_trailing_comma", {"--prompt-ids", "1,2,"}, "--prompt-ids");
  gen("prompt_longer_than_context",
      {"--prompt-ids",
       [] {
         std::string s = "1";
         for (int i = 0; i < 300; ++i) s += ",1";
         return s;
       }()},
      "256");
  gen("no_prompt", {}, "prompt");
  gen("device_bogus", {"--prompt-ids", "1,2", "--device", "tpu"}, "tpu");
  gen("tp_zero", {"--prompt-ids", "1,2", "--tp", "0"}, "--tp");
  gen("tp_huge", {"--prompt-ids", "1,2", "--tp", "2000000000"}, "--tp");
  gen("pp_over_layers_no_mpi", {"--prompt-ids", "1,2", "--pp", "1024", "--tp", "1024"}, "");
  gen("fail_on_rank_negative", {"--prompt-ids", "1,2", "--fail-on-rank", "-1"}, "--fail-on-rank");
  gen("seed_word", {"--prompt-ids", "1,2", "--seed", "abc"}, "--seed");
  gen("unknown_flag", {"--prompt-ids", "1,2", "--bogus"}, "--bogus");
  gen("prompt_text_without_tokenizer", {"--prompt", "hello"}, "tokenizer");
  add("generate_model_missing", {}, {"generate", "--model", "{d}/none", "--prompt-ids", "1"}, "config.json");
  add("generate_model_dev_null", {}, {"generate", "--model", "/dev/null", "--prompt-ids", "1"}, "config.json");
  add("generate_no_model", {}, {"generate", "--prompt-ids", "1"}, "--model");

  // inspect.
  add("inspect_no_model", {}, {"inspect"}, "--model");
  add("inspect_model_missing", {}, {"inspect", "--model", "{d}/none"}, "config.json");
  add("inspect_model_empty_string", {}, {"inspect", "--model", ""}, "config.json");
  add("inspect_model_dev_null", {}, {"inspect", "--model", "/dev/null"}, "config.json");
  add("inspect_model_long_path", {}, {"inspect", "--model", "{d}/" + std::string(5000, 'p')}, "config.json");
  add("inspect_unknown_flag", model, {"inspect", "--model", "{d}/m", "--bogus"}, "--bogus");
  add("no_command", {}, {}, "subcommand");
  add("unknown_command", {}, {"explode"}, "subcommand");

  // tokenize.
  const auto tok = [&](const std::string& name, const std::vector<std::string>& extra, const std::string& expect) {
    add(
        "tokenize_" + name, [](const fs::path& d) { copy_fixture("text/tokenizers/mistral_legacy", d / "m"); },
        plus({"tokenize", "--model", "{d}/m"}, extra), expect);
  };
  tok("decode_word", {"--decode", "a,b"}, "--decode");
  tok("decode_negative", {"--decode", "-1"}, "-1");
  tok("decode_over_vocab", {"--decode", "32000"}, "32000");
  tok("decode_huge", {"--decode", "99999999999999999999"}, "99999999999999999999");
  tok("decode_empty_item", {"--decode", "1,,2"}, "--decode");
  tok("file_missing", {"--file", "{d}/none.txt"}, "none.txt");
  tok("file_directory", {"--file", "{d}/m"}, "m");
  tok("file_fifo", {"--file", "{d}/fifo"}, "fifo");
  tok("file_dev_zero", {"--file", "/dev/zero"}, "/dev/zero");
  tok("no_text", {}, "text");
  tok("render_without_chat", {"--text", "hi", "--render"}, "--render");
  tok("unknown_flag", {"--text", "hi", "--bogus"}, "--bogus");
  add("tokenize_no_model", {}, {"tokenize", "--text", "hi"}, "--model");
}

}  // namespace sy::robust
