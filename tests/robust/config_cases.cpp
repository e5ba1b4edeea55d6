// Broken config.json files (the qwen3_moe_base fixture with one thing wrong), each tried with inspect, plan
// and generate: syntax, nesting, numbers out of range, wrong types, missing keys, non-physical values,
// and config.json that is not a regular file.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "robust/robust_case.h"

namespace sy::robust {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

json base_config() { return json::parse(read_file(fixture("qwen3_moe_base") / "config.json")); }

// The fixture with config.json replaced by `text`.
std::function<void(const fs::path&)> with_config_text(std::string text) {
  return [text = std::move(text)](const fs::path& d) {
    copy_fixture("qwen3_moe_base", d / "m");
    write_file(d / "m/config.json", text);
  };
}

// The fixture with one change made to its config.
std::function<void(const fs::path&)> with_config(std::function<void(json&)> change) {
  return [change = std::move(change)](const fs::path& d) {
    copy_fixture("qwen3_moe_base", d / "m");
    json c = base_config();
    change(c);
    write_file(d / "m/config.json", c.dump(1));
  };
}

// key = value, with value as JSON text (so that 1e400, huge integers and the like reach the parser as written).
std::function<void(const fs::path&)> with_raw_value(const std::string& key, const std::string& value_text) {
  return [key, value_text](const fs::path& d) {
    copy_fixture("qwen3_moe_base", d / "m");
    json c = base_config();
    c[key] = "@@VALUE@@";
    std::string text = c.dump(1);
    text.replace(text.find("\"@@VALUE@@\""), 11, value_text);
    write_file(d / "m/config.json", text);
  };
}

std::function<void(const fs::path&)> with_config_replaced_by(std::function<void(const fs::path&)> make) {
  return [make = std::move(make)](const fs::path& d) {
    copy_fixture("qwen3_moe_base", d / "m");
    fs::remove(d / "m/config.json");
    make(d / "m/config.json");
  };
}

}  // namespace

void add_config_cases(std::vector<Case>& out) {
  // Not JSON, or not an object.
  add_model_cases(out, "config_empty", with_config_text(""), "config.json is not valid JSON", "config.json");
  add_model_cases(out, "config_truncated", with_config_text(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden)"),
                  "config.json is not valid JSON", "config.json");
  add_model_cases(out, "config_garbage",
                  with_config_text("\x7f"
                                   "ELF\x01\x02\x03 garbage"),
                  "is not valid JSON", "config.json");
  add_model_cases(out, "config_array", with_config_text("[1, 2, 3]"), "must hold a JSON object", "config.json");
  add_model_cases(out, "config_null", with_config_text("null"), "must hold a JSON object", "config.json");
  add_model_cases(out, "config_invalid_utf8", with_config_text("{\"hidden_act\": \"\xff\xfe\"}"), "is not valid JSON",
                  "config.json");
  add_model_cases(out, "config_nul_bytes", with_config_text(std::string("{\"a\":\0\0\0}", 10)), "is not valid JSON",
                  "config.json");
  add_model_cases(out, "config_deep_70000", with_raw_value("extra", deep_json(70000)), "nested deeper than 64");
  add_model_cases(out, "config_deep_65", with_raw_value("extra", deep_json(65)), "nested deeper than 64");
  add_model_cases(out, "config_deep_objects", with_config_text([] {
                    std::string s;
                    for (int i = 0; i < 20000; ++i) s += "{\"a\":";
                    s += "1";
                    for (int i = 0; i < 20000; ++i) s += "}";
                    return s;
                  }()),
                  "nested deeper than 64");
  add_model_cases(out, "config_number_1e400", with_raw_value("rms_norm_eps", "1e400"), "number overflow",
                  "config.json");
  add_model_cases(out, "config_number_minus_1e400", with_raw_value("rope_theta", "-1e400"), "number overflow",
                  "config.json");

  // Not a regular file.
  add_model_cases(out, "config_missing", with_config_replaced_by([](const fs::path&) {}),
                  "needs a Hugging Face config.json");
  add_model_cases(out, "config_is_directory",
                  with_config_replaced_by([](const fs::path& p) { fs::create_directory(p); }),
                  "it is a directory, not a regular file", "config.json");
  add_model_cases(out, "config_is_fifo", with_config_replaced_by([](const fs::path& p) { mkfifo(p.c_str(), 0644); }),
                  "it is a FIFO, not a regular file");
  add_model_cases(out, "config_links_dev_zero",
                  with_config_replaced_by([](const fs::path& p) { fs::create_symlink("/dev/zero", p); }),
                  "it is a character device, not a regular file");
  add_model_cases(out, "config_links_dev_urandom",
                  with_config_replaced_by([](const fs::path& p) { fs::create_symlink("/dev/urandom", p); }),
                  "it is a character device");
  add_model_cases(out, "config_dangling_symlink",
                  with_config_replaced_by([](const fs::path& p) { fs::create_symlink("/nonexistent/config.json", p); }),
                  "needs a Hugging Face config.json");
  add_model_cases(out, "config_over_64_mib", with_config_replaced_by([](const fs::path& p) {
                    write_file(p, "{}");
                    fs::resize_file(p, (uint64_t{64} << 20) + 1);
                  }),
                  "over the limit of 67108864 bytes");

  // Sizes out of their bounds, before anything is allocated.
  add_model_cases(out, "layers_1e12", with_raw_value("num_hidden_layers", "1000000000000"),
                  "'num_hidden_layers' is 1000000000000, outside the range [1, 4096]");
  add_model_cases(out, "layers_1e9_float", with_raw_value("num_hidden_layers", "1e9"),
                  "'num_hidden_layers' must be an integer");
  add_model_cases(out, "layers_zero", with_raw_value("num_hidden_layers", "0"),
                  "'num_hidden_layers' must be at least 1");
  add_model_cases(out, "layers_negative", with_raw_value("num_hidden_layers", "-4"),
                  "'num_hidden_layers' must be at least 1");
  add_model_cases(out, "layers_uint64_max", with_raw_value("num_hidden_layers", "18446744073709551615"),
                  "outside the range [1, 4096]");
  add_model_cases(out, "layers_2_pow_64", with_raw_value("num_hidden_layers", "18446744073709551616"),
                  "'num_hidden_layers' must be an integer");
  add_model_cases(out, "layers_string", with_raw_value("num_hidden_layers", "\"4\""),
                  "'num_hidden_layers' must be an integer");
  add_model_cases(out, "layers_null", with_raw_value("num_hidden_layers", "null"),
                  "required key 'num_hidden_layers' is missing");
  add_model_cases(out, "layers_missing", with_config([](json& c) { c.erase("num_hidden_layers"); }),
                  "required key 'num_hidden_layers' is missing");
  add_model_cases(out, "head_dim_2e9", with_raw_value("head_dim", "2000000000"),
                  "'head_dim' is 2000000000, outside the range");
  add_model_cases(out, "head_dim_default_zero", with_config([](json& c) {
                    c.erase("head_dim");
                    c["hidden_size"] = 4;
                    c["num_attention_heads"] = 8;
                    c["num_key_value_heads"] = 8;
                  }),
                  "'head_dim' is absent and its default, 0");
  add_model_cases(out, "hidden_1e9", with_raw_value("hidden_size", "1000000000"),
                  "'hidden_size' is 1000000000, outside the range");
  add_model_cases(out, "hidden_zero", with_raw_value("hidden_size", "0"), "'hidden_size' must be at least 1");
  add_model_cases(out, "vocab_1e10", with_raw_value("vocab_size", "10000000000"),
                  "'vocab_size' is 10000000000, outside the range");
  add_model_cases(out, "vocab_float", with_raw_value("vocab_size", "384.5"), "'vocab_size' must be an integer");
  add_model_cases(out, "experts_1e6", with_raw_value("num_experts", "1000000"),
                  "'num_experts' is 1000000, outside the range");
  add_model_cases(out, "inter_1e9", with_raw_value("moe_intermediate_size", "1000000000"),
                  "'moe_intermediate_size' is 1000000000, outside the range");
  add_model_cases(out, "dense_inter_negative", with_raw_value("intermediate_size", "-100"),
                  "'intermediate_size' must be at least 1");
  add_model_cases(out, "heads_1e6", with_raw_value("num_attention_heads", "1000000"),
                  "'num_attention_heads' is 1000000");
  add_model_cases(out, "heads_zero", with_raw_value("num_attention_heads", "0"),
                  "'num_attention_heads' must be at least 1");
  add_model_cases(out, "max_position_1e12", with_raw_value("max_position_embeddings", "1000000000000"),
                  "'max_position_embeddings' is 1000000000000");
  add_model_cases(out, "params_over_1e15", with_config([](json& c) {
                    c["hidden_size"] = 262144;
                    c["moe_intermediate_size"] = 1048576;
                    c["num_experts"] = 16384;
                    c["head_dim"] = 64;
                  }),
                  "parameters, over the 1e+15 this engine accepts");
  add_model_cases(out, "expert_layers_over_bound", with_config([](json& c) {
                    c["num_hidden_layers"] = 4096;
                    c["num_experts"] = 16384;
                  }),
                  "expert tensor sets, over the 1048576");

  // Consistency and non-physical values.
  add_model_cases(out, "top_k_over_experts", with_raw_value("num_experts_per_tok", "99"),
                  "num_experts_per_tok 99 exceeds the 8 experts");
  add_model_cases(out, "top_k_zero", with_raw_value("num_experts_per_tok", "0"),
                  "'num_experts_per_tok' must be at least 1");
  add_model_cases(out, "kv_heads_not_dividing", with_raw_value("num_key_value_heads", "4"),
                  "must be a multiple of num_key_value_heads 4");
  add_model_cases(out, "eps_zero", with_raw_value("rms_norm_eps", "0"),
                  "'rms_norm_eps' is 0, outside the valid range (0, 1]");
  add_model_cases(out, "eps_negative", with_raw_value("rms_norm_eps", "-1e-06"), "'rms_norm_eps' is -1e-06");
  add_model_cases(out, "eps_two", with_raw_value("rms_norm_eps", "2"), "'rms_norm_eps' is 2");
  add_model_cases(out, "eps_string", with_raw_value("rms_norm_eps", "\"1e-6\""), "'rms_norm_eps' must be a number");
  add_model_cases(out, "rope_theta_zero", with_raw_value("rope_theta", "0"), "'rope_theta' is 0");
  add_model_cases(out, "rope_theta_negative", with_raw_value("rope_theta", "-10000"), "'rope_theta' is -10000");
  add_model_cases(out, "rope_factor_zero", with_raw_value("rope_scaling", R"({"rope_type": "linear", "factor": 0})"),
                  "'factor' is 0, outside the valid range");
  add_model_cases(out, "rope_factor_negative",
                  with_raw_value("rope_scaling", R"({"rope_type": "linear", "factor": -2})"), "'factor' is -2");
  add_model_cases(out, "rope_factor_string",
                  with_raw_value("rope_scaling", R"({"rope_type": "linear", "factor": "x"})"),
                  "'factor' must be a number");
  add_model_cases(out, "rope_scaling_string", with_raw_value("rope_scaling", "\"yarn\""),
                  "'rope_scaling' must be an object");
  add_model_cases(out, "rope_type_unknown", with_raw_value("rope_scaling", R"({"rope_type": "bogus", "factor": 2})"),
                  "rope type 'bogus' is not supported");
  add_model_cases(out, "rope_yarn_beta_zero",
                  with_raw_value("rope_scaling", R"({"rope_type": "yarn", "factor": 4, "beta_fast": 0})"),
                  "'beta_fast' is 0");
  add_model_cases(out, "partial_rotary_zero", with_raw_value("partial_rotary_factor", "0"),
                  "'partial_rotary_factor' is 0");
  add_model_cases(out, "partial_rotary_two", with_raw_value("partial_rotary_factor", "2"),
                  "'partial_rotary_factor' is 2");

  // Types and keys.
  add_model_cases(out, "architectures_missing", with_config([](json& c) { c.erase("architectures"); }),
                  "'architectures' must be a non-empty list");
  add_model_cases(out, "architectures_empty", with_raw_value("architectures", "[]"),
                  "'architectures' must be a non-empty list");
  add_model_cases(out, "architectures_number", with_raw_value("architectures", "[5]"),
                  "'architectures' must be a non-empty list");
  add_model_cases(out, "architectures_unknown", with_raw_value("architectures", R"(["LlamaForCausalLM"])"),
                  "architecture 'LlamaForCausalLM' is not");
  add_model_cases(out, "architectures_100k_name",
                  with_config([](json& c) { c["architectures"] = json::array({std::string(100000, 'X')}); }),
                  "… (100000 bytes)");
  add_model_cases(out, "architectures_newline_name", with_raw_value("architectures", R"(["Qwen3\nMoe"])"),
                  "Qwen3\\nMoe");
  add_model_cases(out, "hidden_act_gelu", with_raw_value("hidden_act", "\"gelu\""),
                  "hidden_act 'gelu' is not supported");
  add_model_cases(out, "hidden_act_object", with_raw_value("hidden_act", deep_json(30)),
                  "'hidden_act' must be a string");
  add_model_cases(out, "tie_embeddings_string", with_raw_value("tie_word_embeddings", "\"yes\""),
                  "'tie_word_embeddings' must be true or false");
  add_model_cases(out, "mlp_only_layers_string", with_raw_value("mlp_only_layers", "\"0,1\""),
                  "'mlp_only_layers' must be a list of integers");
  add_model_cases(out, "mlp_only_layers_negative", with_raw_value("mlp_only_layers", "[-1]"),
                  "'mlp_only_layers' must be at least 0");
  add_model_cases(out, "dtype_unknown", with_raw_value("torch_dtype", "\"float8\""), "dtype 'float8' is not one of");
  add_model_cases(out, "sliding_window_on", with_raw_value("use_sliding_window", "true"),
                  "use_sliding_window=true is not supported");
  add_model_cases(out, "quantization_config_string", with_raw_value("quantization_config", "\"fp8\""),
                  "'quantization_config' must be an object");
  add_model_cases(out, "quantization_block_zero",
                  with_raw_value("quantization_config", R"({"quant_method": "fp8", "weight_block_size": [0, 128]})"),
                  "weight_block_size must be two positive integers");
  add_model_cases(out, "long_string_value_cut",
                  with_config([](json& c) { c["hidden_act"] = std::string(1 << 20, 'a'); }), "… (1048576 bytes)");
}

}  // namespace sy::robust
