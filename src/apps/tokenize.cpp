// `switchyard tokenize`: text (or a chat message through the template) to token ids with the model
// folder's tokenizer, and ids back to text.

#include "apps/commands.h"
#include "apps/text_input.h"
#include "base/check.h"
#include "base/input.h"

namespace sy {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  bool chat = false;
  std::string system;
  bool no_special_tokens = false;
  bool render = false;
  std::string decode;
  bool skip_special_tokens = false;
};

std::string read_file(const std::string& path) { return read_regular_file(path, uint64_t{1} << 30, "--file"); }

int run_tokenize(const TokenizeOptions& o) {
  const int inputs = (o.text.empty() ? 0 : 1) + (o.file.empty() ? 0 : 1) + (o.decode.empty() ? 0 : 1);
  SY_CHECK(inputs == 1, "give exactly one of --text, --file and --decode (got {})", inputs);
  SY_CHECK(!o.chat || o.decode.empty(), "--chat encodes a message; it does not go with --decode");
  SY_CHECK(o.system.empty() || o.chat, "--system goes with --chat");
  SY_CHECK(!o.render || o.chat, "--render prints the rendered chat template; it goes with --chat");
  const TextModel model = load_text_model(o.model);
  if (!o.decode.empty()) {
    const std::vector<int32_t> ids = parse_token_ids(o.decode, "--decode");
    for (int32_t id : ids) {
      SY_CHECK(id < model.tokenizer.vocab_size(), "--decode: token id {} is outside the tokenizer's vocabulary [0, {})",
               id, model.tokenizer.vocab_size());
    }
    const std::string text = model.tokenizer.decode(ids, o.skip_special_tokens);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  const std::string input = o.file.empty() ? o.text : read_file(o.file);
  std::vector<int32_t> ids;
  if (o.chat) {
    const std::string rendered = render_chat(model, o.system, input);
    if (o.render) {
      std::fwrite(rendered.data(), 1, rendered.size(), stdout);
      return 0;
    }
    ids = model.tokenizer.encode(rendered, /*add_special_tokens=*/false);
  } else {
    ids = model.tokenizer.encode(input, !o.no_special_tokens);
  }
  std::string line;
  for (int32_t t : ids) {
    if (!line.empty()) line += ',';
    line += std::to_string(t);
  }
  std::printf("%s\n", line.c_str());
  std::fprintf(stderr, "%zu tokens\n", ids.size());
  return 0;
}

}  // namespace

CommandMain add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "text to token ids with the model's tokenizer, or ids to text");
  cmd->add_option("--model,--tokenizer", o->model, "model or tokenizer folder (tokenizer.json or tiktoken.model)")
      ->required();
  cmd->add_option("--text", o->text, "the text to encode");
  cmd->add_option("--file", o->file, "encode the contents of this file");
  cmd->add_flag("--chat", o->chat, "encode the text as one user message through the chat template");
  cmd->add_option("--system", o->system, "system message of --chat");
  cmd->add_flag("--render", o->render, "with --chat: print the rendered template instead of ids");
  cmd->add_flag("--no-special-tokens", o->no_special_tokens, "do not add the post-processor's BOS/EOS");
  cmd->add_option("--decode", o->decode, "comma-separated token ids to decode into text");
  cmd->add_flag("--skip-special-tokens", o->skip_special_tokens, "with --decode: leave special tokens out");
  return [o] { return run_tokenize(*o); };
}

}  // namespace sy
