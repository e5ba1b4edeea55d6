// One streaming OpenAI request on an io_context shared with others, from its start to its outcome: connect
// (or take an idle kept-alive connection), write, read the header, then the event stream as it arrives,
// timing each chunk; optionally cut by the client after a number of chunks (a disconnecting user).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "bench_client/load.h"

namespace sy::bench {

// What runs the streams: the load of `bench serve` (load.cpp) and the soak (soak.cpp).
class StreamHost {
 public:
  virtual ~StreamHost() = default;
  virtual boost::asio::io_context& io() = 0;
  virtual const boost::asio::ip::tcp::resolver::results_type& endpoints() const = 0;
  // url, route and api_key are read; the spec outlives every stream.
  virtual const LoadSpec& spec() const = 0;
  // The stream `index` ended; `keep` is its connection when it may carry the next request.
  virtual void stream_done(size_t index, RequestOutcome outcome, std::optional<boost::asio::ip::tcp::socket> keep) = 0;
};

// Starts request `index` with `body` (which outlives it). `cut_after_chunks` >= 0: the client closes the
// connection once that many text chunks have arrived (0: as soon as the reply's header has), and the
// outcome says so (cut_by_client) unless the stream ended first.
void start_stream(StreamHost& host, size_t index, const std::string& body,
                  std::optional<boost::asio::ip::tcp::socket> idle, int64_t cut_after_chunks = -1);

// Thousands of sockets need more than the usual soft limit of 1,024 open files.
void raise_open_files_limit();

}  // namespace sy::bench
