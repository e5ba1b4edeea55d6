// Incremental server-sent events: bytes in as they arrive, each event's data out once its blank line has.
#pragma once

#include <string>
#include <string_view>

namespace sy::bench {

// Lines end in \n or \r\n; `data:` lines of one event are joined with \n (the SSE rules); other fields
// (event:, id:, comments) are skipped, as OpenAI streams carry everything in data.
class SseParser {
 public:
  // Calls on_event(std::string_view data) for each complete event; bytes of an unfinished line are kept.
  template <typename OnEvent>
  void feed(std::string_view bytes, OnEvent&& on_event) {
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t eol = bytes.find('\n', pos);
      if (eol == std::string_view::npos) {
        line_.append(bytes.substr(pos));
        return;
      }
      std::string_view line = bytes.substr(pos, eol - pos);
      pos = eol + 1;
      if (!line_.empty()) {
        line_.append(line);
        line = line_;
      }
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) {
        if (has_data_) on_event(std::string_view(data_));
        data_.clear();
        has_data_ = false;
      } else {
        take_line(line);
      }
      line_.clear();
    }
  }

 private:
  void take_line(std::string_view line);
  std::string line_;  // an unfinished line
  std::string data_;  // the data of the event being read
  bool has_data_ = false;
};

}  // namespace sy::bench
