// Jinja's built-ins as the sandboxed environment exposes them: attribute and item lookup, iteration,
// Python operators, filters, tests, methods of str/dict/list, and the global functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/value.h"

namespace sy::text::jinja {

// environment.getattr / getitem of the sandbox: a dict key as attribute, methods as attributes, undefined
// for what is missing; an error for lookups on undefined values.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// The undefined value of a failed lookup, with Jinja's message ("'dict object' has no attribute 'x'").
Value missing(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Python iteration: list/tuple items, str code points, dict keys; undefined iterates as empty.
std::vector<Value> iterate(const Value& v);
// Python's binary operators (+ - * / // % ** ~ and `in`), with Python's errors.
Value binary_op(std::string_view op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// Fails with the undefined value's message when `v` is undefined (Jinja's strict operations).
void check_defined(const Value& v);

// Python's str.format (fields {} {0} {name}, no format specs) and printf-style `fmt % args`.
std::string str_format(const std::string& fmt, CallArgs& args);
std::string percent_format(const std::string& fmt, const Value& args);

// Filters and tests by name; throw "no filter named ..." for unknown names.
Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

// The global functions a template sees (range, namespace, dict, raise_exception, strftime_now, ...).
std::vector<std::pair<std::string, Value>> global_functions();

// The error raise_exception() throws: its message is the template's, passed through unchanged.
struct TemplateRaised {
  std::string message;
};

// Reads call arguments by position or keyword, Python style; unused arguments are an error at done().
class ArgReader {
 public:
  ArgReader(std::string_view fn, CallArgs& args) : fn_(fn), args_(args), used_kw_(args.kw.size(), false) {}
  // The argument at positional index `pos` or keyword `kw`; undefined-valued Value() when absent.
  Value get(size_t pos, std::string_view kw, Value fallback = Value());
  bool has(size_t pos, std::string_view kw) const;
  void done() const;
  size_t positional() const { return args_.pos.size(); }

 private:
  std::string fn_;
  CallArgs& args_;
  std::vector<bool> used_kw_;
  size_t max_pos_ = 0;
};

}  // namespace sy::text::jinja
