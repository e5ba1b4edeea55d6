// The field rule of server-sent events; the line splitting is inline in sse.h.
#include "bench_client/sse.h"

namespace sy::bench {

void SseParser::take_line(std::string_view line) {
  if (!line.starts_with("data:")) return;
  line.remove_prefix(5);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(line);
  has_data_ = true;
}

}  // namespace sy::bench
