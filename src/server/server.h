// `switchyard serve` below the command line: the HTTP server on one io thread and the serving loop on
// the calling thread, wired together, until SIGINT or SIGTERM drains them.
#pragma once

#include "server/http_server.h"
#include "server/server_context.h"

namespace sy::server {

struct ServeConfig {
  HttpServerConfig http;
  ServerSettings settings;
  double drain_seconds = 30.0;  // after a signal, in-flight requests get this long before they are aborted
};

// Serves until SIGINT or SIGTERM: then stops accepting, lets in-flight requests finish within
// drain_seconds (the rest end with finish_reason "abort"), closes every connection and returns 0 (1 when
// the engine failed). Logs "listening on http://HOST:PORT" once bound. `loop` runs on the calling thread
// (under MPI it must be the thread that initialised MPI).
int run_server(const ServeConfig& config, ServingLoop& loop, const text::Tokenizer& tokenizer,
               const text::ChatTemplate* chat_template);

}  // namespace sy::server
