// Request handlers: body → validated request → prompt tokens (text encoded, chat rendered through the
// template) → generation; each failure an OpenAI error body with its status.
#include "server/router.h"

#include <fmt/format.h>

#include <array>
#include <string_view>

#include "base/check.h"
#include "server/generation.h"
#include "server/openai_responses.h"

namespace sy::server {

namespace {

void check_model(const ServerContext& ctx, const SamplingFields& s) {
  if (!s.model.empty() && s.model != ctx.settings.model_name) {
    throw ApiError(404, fmt::format("The model `{}` does not exist.", s.model), "model", "model_not_found");
  }
}

void check_vocabulary(const ServerContext& ctx, const std::vector<int32_t>& ids, const char* param) {
  for (int32_t t : ids) {
    if (t >= ctx.settings.vocab_size) {
      throw ApiError(
          400, fmt::format("token id {} is outside the model's vocabulary of {} tokens", t, ctx.settings.vocab_size),
          param);
    }
  }
}

std::string render_chat(const ServerContext& ctx, const ChatRequest& r) {
  if (ctx.chat_template == nullptr) {
    throw ApiError(400,
                   "the model has no chat template (chat_template.jinja or tokenizer_config.json's "
                   "chat_template); use /v1/completions");
  }
  text::ChatInputs inputs{.messages = r.messages,
                          .tools = r.tools,
                          .add_generation_prompt = r.add_generation_prompt,
                          .kwargs = r.chat_template_kwargs};
  try {
    return ctx.chat_template->render(inputs);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("the chat template failed on these messages: {}", e.what()), "messages");
  }
}

// Prompt tokens, max_tokens checked against the context, and the generation started.
void generate(ServerContext& ctx, const HttpRequest& req, std::shared_ptr<HttpExchange> ex, ApiKind kind,
              SamplingFields s, std::vector<std::vector<int32_t>> prompts) {
  GenerationSpec spec{.kind = kind, .sampling = std::move(s), .arrival = req.received};
  for (auto& p : prompts) {
    if (p.empty()) throw ApiError(400, "the prompt encodes to no tokens; give some text", "prompt");
    spec.max_new_tokens.push_back(
        check_context(static_cast<int64_t>(p.size()), spec.sampling.max_tokens, ctx.settings.max_model_len));
    spec.prompts.push_back(std::move(p));
  }
  start_generation(ctx, std::move(ex), std::move(spec));
}

void completions(ServerContext& ctx, const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  CompletionRequest r = parse_completion_request(parse_body(req.body));
  check_model(ctx, r.sampling);
  std::vector<std::vector<int32_t>> prompts = std::move(r.prompt_ids);
  for (const auto& t : r.prompt_texts) prompts.push_back(ctx.tokenizer.encode(t, /*add_special_tokens=*/true));
  for (const auto& p : prompts) check_vocabulary(ctx, p, "prompt");
  generate(ctx, req, std::move(ex), ApiKind::completion, std::move(r.sampling), std::move(prompts));
}

void chat_completions(ServerContext& ctx, const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  ChatRequest r = parse_chat_request(parse_body(req.body));
  check_model(ctx, r.sampling);
  std::vector<int32_t> ids = ctx.tokenizer.encode(render_chat(ctx, r), /*add_special_tokens=*/false);
  check_vocabulary(ctx, ids, "messages");
  generate(ctx, req, std::move(ex), ApiKind::chat, std::move(r.sampling), {std::move(ids)});
}

void tokenize(ServerContext& ctx, const HttpRequest& req, HttpExchange& ex) {
  const TokenizeRequest r = parse_tokenize_request(parse_body(req.body));
  const std::string text = r.prompt ? *r.prompt : render_chat(ctx, r.chat);
  const std::vector<int32_t> ids = ctx.tokenizer.encode(text, r.add_special_tokens);
  const json body = {
      {"count", ids.size()}, {"max_model_len", ctx.settings.max_model_len}, {"tokens", ids}, {"token_strs", nullptr}};
  ex.reply(200, dump(body));
}

void detokenize(ServerContext& ctx, const HttpRequest& req, HttpExchange& ex) {
  const DetokenizeRequest r = parse_detokenize_request(parse_body(req.body));
  check_vocabulary(ctx, r.tokens, "tokens");
  ex.reply(200, dump(json{{"prompt", ctx.tokenizer.decode(r.tokens, /*skip_special_tokens=*/false)}}));
}

struct Route {
  std::string_view path;
  std::string_view method;
  bool needs_key;
  void (*handle)(ServerContext&, const HttpRequest&, std::shared_ptr<HttpExchange>);
};

const std::array<Route, 7> kRoutes = {{
    {"/v1/completions", "POST", true,
     [](ServerContext& c, const HttpRequest& r, std::shared_ptr<HttpExchange> e) { completions(c, r, std::move(e)); }},
    {"/v1/chat/completions", "POST", true,
     [](ServerContext& c, const HttpRequest& r, std::shared_ptr<HttpExchange> e) {
       chat_completions(c, r, std::move(e));
     }},
    {"/v1/models", "GET", true,
     [](ServerContext& c, const HttpRequest&, std::shared_ptr<HttpExchange> e) {
       e->reply(200,
                dump(model_list(c.settings.model_name, c.settings.model_root, c.started, c.settings.max_model_len)));
     }},
    {"/health", "GET", false,
     [](ServerContext& c, const HttpRequest&, std::shared_ptr<HttpExchange> e) {
       if (c.stopping) return e->reply(503, error_body(503, "the server is shutting down"));
       e->reply(200, "", "text/plain; charset=utf-8");
     }},
    {"/metrics", "GET", false,
     [](ServerContext& c, const HttpRequest&, std::shared_ptr<HttpExchange> e) {
       e->reply(200, c.metrics.render(c.loop.stats()), "text/plain; version=0.0.4; charset=utf-8");
     }},
    {"/tokenize", "POST", true,
     [](ServerContext& c, const HttpRequest& r, std::shared_ptr<HttpExchange> e) { tokenize(c, r, *e); }},
    {"/detokenize", "POST", true,
     [](ServerContext& c, const HttpRequest& r, std::shared_ptr<HttpExchange> e) { detokenize(c, r, *e); }},
}};

void handle(ServerContext& ctx, const HttpRequest& req, std::shared_ptr<HttpExchange> ex) {
  const Route* route = nullptr;
  bool path_known = false;
  for (const Route& r : kRoutes) {
    if (r.path != req.path) continue;
    path_known = true;
    if (r.method == req.method) route = &r;
  }
  if (!path_known) {
    throw ApiError(404, fmt::format("no route {} {}; this server answers POST /v1/completions, POST "
                                    "/v1/chat/completions, GET /v1/models, GET /health, GET /metrics, POST "
                                    "/tokenize and POST /detokenize",
                                    req.method, req.path));
  }
  if (route == nullptr) {
    for (const Route& r : kRoutes) {
      if (r.path == req.path) {
        throw ApiError(405, fmt::format("{} takes {} requests, not {}", req.path, r.method, req.method));
      }
    }
  }
  if (route->needs_key && !ctx.settings.api_key.empty() && req.authorization != "Bearer " + ctx.settings.api_key) {
    throw ApiError(401,
                   req.authorization.empty() ? "no API key given; send it as the header 'Authorization: Bearer <key>'"
                                             : "Incorrect API key provided.",
                   "", "invalid_api_key");
  }
  route->handle(ctx, req, std::move(ex));
}

}  // namespace

HttpHandler make_router(ServerContext& ctx) {
  return [&ctx](HttpRequest req, std::shared_ptr<HttpExchange> ex) {
    try {
      handle(ctx, req, ex);
    } catch (const ApiError& e) {
      ex->reply(e.status(), error_body(e.status(), e.what(), e.param(), e.code()));
    } catch (const Error& e) {
      ex->reply(400, error_body(400, e.what()));
    } catch (const std::exception& e) {
      ex->reply(500, error_body(500, fmt::format("internal error: {}", e.what())));
    }
  };
}

}  // namespace sy::server
