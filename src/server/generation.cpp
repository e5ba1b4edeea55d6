// The life of a generation request: submit, stream or collect, finish, record.
#include "server/generation.h"

#include <chrono>
#include <ctime>
#include <optional>

#include "base/check.h"
#include "base/log.h"
#include "server/openai_responses.h"

namespace sy::server {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string random_id(ServerContext& ctx, const char* prefix) {
  return fmt::format("{}{:016x}{:016x}", prefix, ctx.rng(), ctx.rng());
}

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(ServerContext& ctx, std::shared_ptr<HttpExchange> exchange, GenerationSpec spec)
      : ctx_(ctx), exchange_(std::move(exchange)), spec_(std::move(spec)), arrival_(spec_.arrival) {
    const bool chat = spec_.kind == ApiKind::chat;
    header_ = {.id = random_id(ctx_, chat ? "chatcmpl-" : "cmpl-"),
               .created = static_cast<int64_t>(std::time(nullptr)),
               .model = ctx_.settings.model_name};
  }

  void start() {
    const SamplingFields& s = spec_.sampling;
    const size_t total = spec_.prompts.size() * static_cast<size_t>(s.n);
    if (ctx_.stopping) throw ApiError(503, "the server is shutting down");
    if (ctx_.settings.max_queued_requests > 0) {
      const int64_t waiting = ctx_.loop.stats().waiting;
      if (waiting + static_cast<int64_t>(total) > ctx_.settings.max_queued_requests) {
        throw ApiError(503, fmt::format("the server has {} requests waiting, its limit is {} "
                                        "(--max-queued-requests); retry later",
                                        waiting, ctx_.settings.max_queued_requests));
      }
    }
    std::vector<int32_t> stop_tokens = s.ignore_eos ? std::vector<int32_t>{} : ctx_.settings.eos_token_ids;
    stop_tokens.insert(stop_tokens.end(), s.stop_token_ids.begin(), s.stop_token_ids.end());
    const uint64_t base_seed = s.seed.value_or(ctx_.rng());
    std::vector<ServeRequest> requests;
    for (size_t p = 0; p < spec_.prompts.size(); ++p) {
      for (int64_t j = 0; j < s.n; ++j) {
        ServeRequest r{.prompt = spec_.prompts[p],
                       .max_new_tokens = spec_.max_new_tokens[p],
                       .sampling = {.temperature = s.temperature,
                                    .top_k = s.top_k,
                                    .top_p = s.top_p,
                                    .min_p = s.min_p,
                                    .seed = base_seed + static_cast<uint64_t>(j)},
                       .stop_tokens = stop_tokens,
                       .logprobs = s.logprobs};
        requests.push_back(std::move(r));
        choices_.emplace_back(ctx_.tokenizer, s.stop, s.stop_token_ids, s.logprobs >= 0,
                              static_cast<int64_t>(spec_.prompts[p].size()));
      }
    }
    remaining_ = choices_.size();
    for (size_t i = 0; i < requests.size(); ++i) {
      try {
        choices_[i].engine_id = ctx_.loop.submit(std::move(requests[i]), sink(i));
      } catch (const Error& e) {
        abort_all();
        if (ctx_.stopping) throw ApiError(503, "the server is shutting down");
        throw ApiError(400, e.what());
      }
    }
    exchange_->on_client_gone([weak = weak_from_this()] {
      if (auto job = weak.lock()) job->abort_all();
    });
    if (s.stream) {
      exchange_->start_stream();
      if (spec_.kind == ApiKind::chat) {
        for (size_t i = 0; i < choices_.size(); ++i) {
          exchange_->send_event(sse(chat_chunk(header_, static_cast<int64_t>(i),
                                               {{"role", "assistant"}, {"content", ""}}, nullptr, "", nullptr)));
        }
      }
    }
  }

 private:
  struct Choice {
    Choice(const text::Tokenizer& t, std::vector<std::string> stop, std::vector<int32_t> stop_ids, bool logprobs,
           int64_t prompt_tokens)
        : stream(t, std::move(stop), std::move(stop_ids), logprobs), prompt_tokens(prompt_tokens) {}
    ChoiceStream stream;
    int64_t prompt_tokens;
    int64_t cached_tokens = 0;  // from the prefix cache, as the engine reported it
    int64_t engine_id = -1;
    bool done = false;
    std::string text;                    // non-streamed: the whole text
    std::vector<TokenLogprob> logprobs;  // non-streamed: every token's
    int64_t text_offset = 0;             // completions' logprobs.text_offset of the next token
    std::string finish_reason;
    std::string error;  // finish_reason "error": why the engine ended it
    json stop_reason;
    std::optional<Clock::time_point> first_token, last_token, scheduled;
    std::vector<double> inter_token;
  };

  // The loop's thread calls the sink; the event is handled on the io thread. The sink lets go of the job
  // with the last event, so that the job ends on the io thread.
  TokenSink sink(size_t i) {
    return [job = shared_from_this(), i](const TokenEvent& ev) mutable {
      std::shared_ptr<GenerationJob> j = ev.finish != FinishReason::none ? std::move(job) : job;
      if (!j) return;
      HttpExchange& ex = *j->exchange_;
      ex.post([j = std::move(j), i, ev] { j->on_event(i, ev); });
    };
  }

  void abort_all() {
    for (const Choice& c : choices_) {
      if (!c.done && c.engine_id >= 0) ctx_.loop.abort(c.engine_id);
    }
  }

  void on_event(size_t i, const TokenEvent& ev) {
    Choice& c = choices_[i];
    if (c.done) return;
    const Clock::time_point now = Clock::now();
    if (ev.scheduled_at && !c.scheduled) c.scheduled = ev.scheduled_at;
    c.cached_tokens = std::max(c.cached_tokens, ev.cached_tokens);
    if (ev.has_token) {
      if (c.last_token) c.inter_token.push_back(since(*c.last_token, now));
      if (!c.first_token) c.first_token = now;
      c.last_token = now;
    }
    std::optional<ChoiceDelta> d = c.stream.on_event(ev);
    if (!d) return;
    if (d->stopped_on_string) ctx_.loop.abort(c.engine_id);
    if (spec_.sampling.stream) {
      send_delta(i, *d);
    } else {
      c.text += d->text;
      c.logprobs.insert(c.logprobs.end(), d->logprobs.begin(), d->logprobs.end());
    }
    if (!d->finished) return;
    c.done = true;
    c.finish_reason = d->finish_reason;
    c.error = d->error;
    c.stop_reason = d->stop_reason;
    record(i, now);
    if (--remaining_ == 0) finish();
  }

  void send_delta(size_t i, const ChoiceDelta& d) {
    if (d.text.empty() && d.logprobs.empty() && !d.finished) return;
    if (!d.error.empty()) {
      // The stream ends with an error event in place of the finishing chunk (as vLLM's server does), then
      // [DONE]; the text sent before it stands.
      exchange_->send_event("data: " + error_body(500, failure_message(i, d.error), {}, kFailureCode) + "\n\n");
      return;
    }
    Choice& c = choices_[i];
    const auto index = static_cast<int64_t>(i);
    if (spec_.kind == ApiKind::completion) {
      const json logprobs =
          spec_.sampling.logprobs >= 0 ? completion_logprobs(ctx_.tokenizer, d.logprobs, c.text_offset) : json(nullptr);
      exchange_->send_event(sse(completion_chunk(header_, index, d.text, logprobs, d.finish_reason, d.stop_reason)));
    } else {
      const json logprobs = spec_.sampling.logprobs >= 0
                                ? json{{"content", chat_logprobs_content(ctx_.tokenizer, d.logprobs)}}
                                : json(nullptr);
      const json delta = d.text.empty() && d.finished ? json::object() : json{{"content", d.text}};
      exchange_->send_event(sse(chat_chunk(header_, index, delta, logprobs, d.finish_reason, d.stop_reason)));
    }
  }

  json total_usage() const {
    int64_t prompt = 0, completion = 0, cached = 0;
    const auto n = static_cast<size_t>(spec_.sampling.n);
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (i % n == 0) {  // a prompt run n times counts once
        prompt += choices_[i].prompt_tokens;
        cached += choices_[i].cached_tokens;
      }
      completion += choices_[i].stream.output_tokens();
    }
    return usage(prompt, completion, cached);
  }

  void finish() {
    if (spec_.sampling.stream) {
      if (spec_.sampling.include_usage) {
        const char* object = spec_.kind == ApiKind::chat ? "chat.completion.chunk" : "text_completion";
        exchange_->send_event(sse(usage_chunk(header_, object, total_usage())));
      }
      exchange_->send_event(kSseDone);
      exchange_->end_stream();
      return;
    }
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i].error.empty()) continue;
      exchange_->reply(500, error_body(500, failure_message(i, choices_[i].error), {}, kFailureCode));
      return;
    }
    std::vector<FinishedChoice> out;
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      json logprobs = nullptr;
      if (spec_.sampling.logprobs >= 0) {
        int64_t offset = 0;
        logprobs = spec_.kind == ApiKind::completion
                       ? completion_logprobs(ctx_.tokenizer, c.logprobs, offset)
                       : json{{"content", chat_logprobs_content(ctx_.tokenizer, c.logprobs)}};
      }
      out.push_back({.index = static_cast<int64_t>(i),
                     .text = std::move(c.text),
                     .logprobs = std::move(logprobs),
                     .finish_reason = c.finish_reason,
                     .stop_reason = c.stop_reason});
    }
    const json body = spec_.kind == ApiKind::completion ? completion_response(header_, out, total_usage())
                                                        : chat_response(header_, out, total_usage());
    exchange_->reply(200, dump(body));
  }

  // A choice the engine ended (its logits were not finite): the request fails, the server goes on.
  static constexpr const char* kFailureCode = "non_finite_logits";
  std::string failure_message(size_t i, const std::string& error) const {
    return fmt::format("request {}{} failed: {}", header_.id, choices_.size() > 1 ? fmt::format(" (choice {})", i) : "",
                       error);
  }

  void record(size_t i, Clock::time_point now) {
    Choice& c = choices_[i];
    RequestTiming t{.queue_seconds = c.scheduled ? since(arrival_, *c.scheduled) : -1.0,
                    .first_token_seconds = c.first_token ? since(arrival_, *c.first_token) : -1.0,
                    .e2e_seconds = since(arrival_, now),
                    .inter_token_seconds = std::move(c.inter_token),
                    .prompt_tokens = c.prompt_tokens,
                    .output_tokens = c.stream.output_tokens(),
                    .finish_reason = c.finish_reason};
    ctx_.metrics.record(t);
    log_info("request {}{}: {} prompt tokens ({} cached), {} output tokens, finish {}, ttft {:.3f} s, total {:.3f} s",
             header_.id, choices_.size() > 1 ? fmt::format("/{}", i) : "", t.prompt_tokens, c.cached_tokens,
             t.output_tokens, t.finish_reason, std::max(t.first_token_seconds, 0.0), t.e2e_seconds);
  }

  ServerContext& ctx_;
  std::shared_ptr<HttpExchange> exchange_;
  GenerationSpec spec_;
  Clock::time_point arrival_;
  ResponseHeader header_;
  std::vector<Choice> choices_;
  size_t remaining_ = 0;
};

}  // namespace

void start_generation(ServerContext& ctx, std::shared_ptr<HttpExchange> exchange, GenerationSpec spec) {
  std::make_shared<GenerationJob>(ctx, std::move(exchange), std::move(spec))->start();
}

}  // namespace sy::server
