// Threads and shutdown of the server: the loop on the calling thread, HTTP and signals on the io thread.
#include "server/server.h"

#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include "base/log.h"
#include "server/router.h"

namespace sy::server {

int run_server(const ServeConfig& config, ServingLoop& loop, const text::Tokenizer& tokenizer,
               const text::ChatTemplate* chat_template) {
  Metrics metrics(config.settings.model_name, config.settings.max_model_len);
  ServerContext ctx{.tokenizer = tokenizer,
                    .chat_template = chat_template,
                    .loop = loop,
                    .metrics = metrics,
                    .settings = config.settings,
                    .started = static_cast<int64_t>(std::time(nullptr))};
  HttpServer http(config.http, make_router(ctx));

  int signals_seen = 0;
  boost::asio::signal_set signals(http.io(), SIGINT, SIGTERM);
  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec,
                                                                             int signo) {
    if (ec) return;
    ++signals_seen;
    if (signals_seen == 1) {
      log_info("{}: no new connections; draining in-flight requests (at most {} s)", strsignal(signo),
               config.drain_seconds);
      ctx.stopping = true;
      http.stop_accepting();
      loop.stop(config.drain_seconds);
    } else {
      log_info("{} again: exiting now", strsignal(signo));
      std::_Exit(1);
    }
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  log_info("listening on http://{}:{} (model '{}')", config.http.host, http.port(), config.settings.model_name);
  // The loop runs on this thread (under MPI, the one that initialised it); HTTP on its own. io.run() ends
  // once http.shutdown() has closed every connection.
  std::thread io([&] { http.run(); });
  bool engine_failed = false;
  try {
    loop.run();
  } catch (const std::exception& e) {
    log_line(LogLevel::error, fmt::format("the engine failed: {}; stopping the server", e.what()));
    engine_failed = true;
    ctx.stopping = true;
  }
  http.shutdown();
  io.join();
  log_info("server stopped");
  return engine_failed ? 1 : 0;
}

}  // namespace sy::server
