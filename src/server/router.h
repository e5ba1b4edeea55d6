// The routes of the OpenAI-compatible API and the handlers behind them: /v1/completions,
// /v1/chat/completions, /v1/models, /health, /metrics, /tokenize, /detokenize; API key, 404 and 405.
#pragma once

#include "server/http_server.h"
#include "server/server_context.h"

namespace sy::server {

// The handler of every request; `ctx` outlives the server.
HttpHandler make_router(ServerContext& ctx);

}  // namespace sy::server
