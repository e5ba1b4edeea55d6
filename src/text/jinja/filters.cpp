// Jinja's filters as jinja2/filters.py defines them, plus transformers' tojson.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "base/check.h"
#include "text/jinja/builtins.h"
#include "text/jinja/strings.h"

namespace sy::text::jinja {
namespace {

using Filter = Value (*)(const Value&, ArgReader&);

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return 0;
    case Value::Kind::string:
      return static_cast<int64_t>(str::length(v.as_string()));
    case Value::Kind::list:
      SY_CHECK(!v.is_iterator(), "object of type 'generator' has no len()");
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::dict:
      return static_cast<int64_t>(v.dict_data().items.size());
    default:
      SY_FAIL("object of type '{}' has no len()", v.type_name());
  }
}

Value ignore_case(const Value& v) { return v.is_string() ? Value(str::lower(v.as_string())) : v; }

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0, each with getitem.
Value lookup_attribute(const Value& item, const Value& attribute, const Value& fallback = Value()) {
  Value v = item;
  if (attribute.is_string()) {
    for (const auto& part : str::split(attribute.as_string(), std::string("."), -1)) {
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    }
  } else {
    v = get_item(v, attribute);
  }
  if (v.is_undefined() && !fallback.is_undefined() && !fallback.is_none()) return fallback;
  return v;
}

std::function<Value(const Value&)> key_func(const Value& attribute, bool case_sensitive) {
  return [attribute, case_sensitive](const Value& item) {
    Value v = attribute.is_undefined() || attribute.is_none() ? item : lookup_attribute(item, attribute);
    return case_sensitive ? v : ignore_case(v);
  };
}

std::vector<Value> sorted(std::vector<Value> items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key(items[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? compare_values(b.first, a.first) < 0 : compare_values(a.first, b.first) < 0;
  });
  std::vector<Value> out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

Value f_tojson(const Value& v, ArgReader& r) {
  Value ensure_ascii = r.get(0, "ensure_ascii", Value(false));
  Value indent = r.get(1, "indent", Value::none());
  Value separators = r.get(2, "separators", Value::none());
  Value sort_keys = r.get(3, "sort_keys", Value(false));
  JsonStyle st;
  st.ensure_ascii = ensure_ascii.truthy();
  if (indent.is_string()) {
    st.indent = 0;
    st.indent_str = indent.as_string();
  } else if (!indent.is_none()) {
    st.indent = static_cast<int>(std::max<int64_t>(0, indent.to_int()));
  }
  st.item_sep = st.indent >= 0 ? "," : ", ";
  st.key_sep = ": ";
  if (!separators.is_none()) {
    SY_CHECK(separators.is_list() && separators.items().size() == 2 && separators.items()[0].is_string() &&
                 separators.items()[1].is_string(),
             "tojson separators must be an (item_separator, key_separator) pair");
    st.item_sep = separators.items()[0].as_string();
    st.key_sep = separators.items()[1].as_string();
  }
  st.sort_keys = sort_keys.truthy();
  return Value(to_json(v, st));
}

Value f_trim(const Value& v, ArgReader& r) {
  Value chars = r.get(0, "chars", Value::none());
  return Value(str::strip(v.str(), chars.is_none() ? std::nullopt : std::optional(chars.str()), true, true));
}

Value f_length(const Value& v, ArgReader&) { return Value(py_len(v)); }

Value f_first(const Value& v, ArgReader&) {
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(const Value& v, ArgReader&) {
  check_defined(v);
  SY_CHECK(!v.is_iterator(), "'generator' object is not reversible");
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_join(const Value& v, ArgReader& r) {
  Value sep = r.get(0, "d", Value(""));
  Value attribute = r.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep.str();
    first = false;
    out += (attribute.is_none() ? item : lookup_attribute(item, attribute)).str();
  }
  return Value(out);
}

Value f_default(const Value& v, ArgReader& r) {
  Value fallback = r.get(0, "default_value", Value(""));
  bool boolean = r.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
  return v;
}

Value f_upper(const Value& v, ArgReader&) { return Value(str::upper(v.str())); }
Value f_lower(const Value& v, ArgReader&) { return Value(str::lower(v.str())); }
Value f_title(const Value& v, ArgReader&) { return Value(str::jinja_title(v.str())); }
Value f_capitalize(const Value& v, ArgReader&) { return Value(str::capitalize(v.str())); }
Value f_string(const Value& v, ArgReader&) { return Value(v.str()); }
Value f_safe(const Value& v, ArgReader&) { return Value(v.str()); }
Value f_escape(const Value& v, ArgReader&) { return Value(html_escape(v.str())); }

Value f_replace(const Value& v, ArgReader& r) {
  Value old = r.get(0, "old"), with = r.get(1, "new"), count = r.get(2, "count", Value::none());
  return Value(str::replace(v.str(), old.str(), with.str(), count.is_none() ? -1 : count.to_int()));
}

// Python int(str, base): optional sign, digits with single underscores between them, surrounding spaces.
std::optional<int64_t> parse_int(const std::string& text, int base) {
  std::string s = str::strip(text, std::nullopt, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  // A 0x / 0o / 0b prefix is allowed when it matches the base; base 0 takes the base from it.
  if (i + 1 < s.size() && s[i] == '0') {
    char p = static_cast<char>(s[i + 1] | 0x20);
    int prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base && (base == prefix_base || base == 0)) {
      base = prefix_base;
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36 || i == s.size()) return std::nullopt;
  __int128 v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_' && prev_digit && i + 1 < s.size() && s[i + 1] != '_') {
      prev_digit = false;
      continue;
    }
    int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    v = v * base + d;
    if (v > static_cast<__int128>(INT64_MAX) + 1) return std::nullopt;
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  v = neg ? -v : v;
  if (v > INT64_MAX) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_float(const std::string& text) {
  std::string s = str::strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty()) return std::nullopt;
  std::string low = str::lower(clean);
  std::string body = low[0] == '+' || low[0] == '-' ? low.substr(1) : low;
  double sign = low[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return NAN;
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

Value f_int(const Value& v, ArgReader& r) {
  Value fallback = r.get(0, "default", Value(0));
  int base = static_cast<int>(r.get(1, "base", Value(10)).to_int());
  if (v.is_int() || v.is_bool()) return Value(v.to_int());
  if (v.is_float()) {
    if (std::isfinite(v.as_float()) && std::fabs(v.as_float()) < 9.2e18)
      return Value(static_cast<int64_t>(v.as_float()));
    return fallback;
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value(*i);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
      return Value(static_cast<int64_t>(*d));
    }
  }
  return fallback;
}

Value f_float(const Value& v, ArgReader& r) {
  Value fallback = r.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value(*d);
  }
  return fallback;
}

Value f_list(const Value& v, ArgReader&) {
  check_defined(v);
  return Value::list(iterate(v));
}

Value f_items(const Value& v, ArgReader&) {
  if (v.is_undefined()) return Value::iterator({});
  SY_CHECK(v.is_dict(), "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict_data().items) out.push_back(Value::list({k, val}, true));
  return Value::iterator(std::move(out));
}

Value f_dictsort(const Value& v, ArgReader& r) {
  bool case_sensitive = r.get(0, "case_sensitive", Value(false)).truthy();
  Value by = r.get(1, "by", Value("key"));
  bool reverse = r.get(2, "reverse", Value(false)).truthy();
  SY_CHECK(v.is_dict(), "dictsort expects a mapping, got {}", v.type_name());
  size_t pos = 0;
  if (by.is_string() && by.as_string() == "value") {
    pos = 1;
  } else {
    SY_CHECK(by.is_string() && by.as_string() == "key", "You can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict_data().items) items.push_back(Value::list({k, val}, true));
  return Value::list(sorted(
      std::move(items),
      [&](const Value& item) {
        const Value& x = item.items()[pos];
        return case_sensitive ? x : ignore_case(x);
      },
      reverse));
}

Value f_map(const Value& v, ArgReader& r) {
  std::vector<Value> out;
  if (!r.has(0, "")) {
    Value attribute = r.get(0, "attribute");
    Value fallback = r.get(0, "default", Value::none());
    SY_CHECK(!attribute.is_undefined(), "map requires a filter name or attribute=");
    for (const auto& item : iterate(v)) out.push_back(lookup_attribute(item, attribute, fallback));
    return Value::iterator(std::move(out));
  }
  Value name = r.get(0, "");
  SY_CHECK(name.is_string(), "map's filter name must be a string");
  CallArgs rest;
  for (size_t i = 1; i < r.positional(); ++i) rest.pos.push_back(r.get(i, ""));
  for (const auto& item : iterate(v)) {
    CallArgs a = rest;
    out.push_back(apply_filter(name.as_string(), item, a));
  }
  return Value::iterator(std::move(out));
}

Value select_or_reject(const Value& v, ArgReader& r, bool select, bool by_attr) {
  size_t next = 0;
  Value attribute;
  if (by_attr) attribute = r.get(next++, "");
  bool has_test = r.has(next, "");
  Value test = has_test ? r.get(next++, "") : Value();
  CallArgs test_args;
  for (size_t i = next; i < r.positional(); ++i) test_args.pos.push_back(r.get(i, ""));
  std::vector<Value> out;
  for (const auto& item : iterate(v)) {
    Value x = by_attr ? lookup_attribute(item, attribute) : item;
    bool ok;
    if (has_test) {
      SY_CHECK(test.is_string(), "test name must be a string");
      CallArgs a = test_args;
      ok = apply_test(test.as_string(), x, a);
    } else {
      ok = x.truthy();
    }
    if (ok == select) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value f_select(const Value& v, ArgReader& r) { return select_or_reject(v, r, true, false); }
Value f_reject(const Value& v, ArgReader& r) { return select_or_reject(v, r, false, false); }
Value f_selectattr(const Value& v, ArgReader& r) { return select_or_reject(v, r, true, true); }
Value f_rejectattr(const Value& v, ArgReader& r) { return select_or_reject(v, r, false, true); }

Value f_unique(const Value& v, ArgReader& r) {
  bool case_sensitive = r.get(0, "case_sensitive", Value(false)).truthy();
  auto key = key_func(r.get(1, "attribute", Value::none()), case_sensitive);
  std::vector<Value> out, seen;
  for (const auto& item : iterate(v)) {
    Value k = key(item);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.equals(k); })) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value f_indent(const Value& v, ArgReader& r) {
  Value width = r.get(0, "width", Value(4));
  bool first = r.get(1, "first", Value(false)).truthy();
  bool blank = r.get(2, "blank", Value(false)).truthy();
  std::string indention = width.is_string()
                              ? width.as_string()
                              : std::string(static_cast<size_t>(std::max<int64_t>(0, width.to_int())), ' ');
  std::string s = v.str() + "\n";
  auto lines = str::splitlines(s);
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + indention : "") + lines[i];
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  return Value(first ? indention + out : out);
}

Value f_round(const Value& v, ArgReader& r) {
  int64_t precision = r.get(0, "precision", Value(0)).to_int();
  std::string method = r.get(1, "method", Value("common")).str();
  SY_CHECK(method == "common" || method == "ceil" || method == "floor", "method must be common, ceil or floor");
  if (method == "common" && (v.is_int() || v.is_bool()) && precision >= 0) return Value(v.to_int());
  double d = v.to_double();
  if (method == "common") {
    if (!std::isfinite(d)) return Value(d);
    char buf[512];
    int p = static_cast<int>(std::clamp<int64_t>(precision, 0, 300));
    if (precision >= 0) {
      std::snprintf(buf, sizeof buf, "%.*f", p, d);  // correctly rounded, ties to even as Python's round
      return Value(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(d / scale) * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  return Value((method == "ceil" ? std::ceil(d * scale) : std::floor(d * scale)) / scale);
}

Value f_abs(const Value& v, ArgReader&) {
  SY_CHECK(v.is_number(), "bad operand type for abs(): '{}'", v.type_name());
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  SY_CHECK(v.to_int() != INT64_MIN, "integer overflow");
  return Value(v.to_int() < 0 ? -v.to_int() : v.to_int());
}

Value f_sum(const Value& v, ArgReader& r) {
  Value attribute = r.get(0, "attribute", Value::none());
  Value total = r.get(1, "start", Value(0));
  for (const auto& item : iterate(v)) {
    total = binary_op("+", total, attribute.is_none() ? item : lookup_attribute(item, attribute));
  }
  return total;
}

Value min_or_max(const Value& v, ArgReader& r, bool want_max) {
  bool case_sensitive = r.get(0, "case_sensitive", Value(false)).truthy();
  auto key = key_func(r.get(1, "attribute", Value::none()), case_sensitive);
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? compare_values(best_key, k) < 0 : compare_values(k, best_key) < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value f_min(const Value& v, ArgReader& r) { return min_or_max(v, r, false); }
Value f_max(const Value& v, ArgReader& r) { return min_or_max(v, r, true); }

Value f_batch(const Value& v, ArgReader& r) {
  int64_t n = r.get(0, "linecount").to_int();
  Value fill = r.get(1, "fill_with", Value::none());
  SY_CHECK(n > 0, "batch size must be positive");
  std::vector<Value> out, cur;
  for (const auto& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::iterator(std::move(out));
}

Value f_wordcount(const Value& v, ArgReader&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : str::decode(v.str())) {
    bool w = str::is_alpha(c) || (c >= '0' && c <= '9') || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_reverse(const Value& v, ArgReader&) {
  if (v.is_string()) {
    auto cps = str::decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(str::encode(cps, 0, cps.size()));
  }
  check_defined(v);
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return v.is_iterator() ? Value::list(std::move(items)) : Value::iterator(std::move(items));
}

Value f_sort(const Value& v, ArgReader& r) {
  bool reverse = r.get(0, "reverse", Value(false)).truthy();
  bool case_sensitive = r.get(1, "case_sensitive", Value(false)).truthy();
  Value attribute = r.get(2, "attribute", Value::none());
  return Value::list(sorted(iterate(v), key_func(attribute, case_sensitive), reverse));
}

Value f_center(const Value& v, ArgReader& r) {
  int64_t width = r.get(0, "width", Value(80)).to_int();
  std::string s = v.str();
  int64_t len = static_cast<int64_t>(str::length(s));
  if (width <= len) return Value(s);
  int64_t marg = width - len;
  int64_t left = marg / 2 + (marg & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(marg - left), ' '));
}

Value f_truncate(const Value& v, ArgReader& r) {
  int64_t length = r.get(0, "length", Value(255)).to_int();
  bool killwords = r.get(1, "killwords", Value(false)).truthy();
  std::string end = r.get(2, "end", Value("...")).str();
  int64_t leeway = r.get(3, "leeway", Value(5)).to_int();
  auto cps = str::decode(v.str());
  auto end_len = static_cast<int64_t>(str::length(end));
  SY_CHECK(length >= end_len, "expected length >= {}, got {}", end_len, length);
  SY_CHECK(leeway >= 0, "expected leeway >= 0, got {}", leeway);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value(v.str());
  std::string head = str::encode(cps, 0, static_cast<size_t>(length - end_len));
  if (killwords) return Value(head + end);
  size_t space = head.rfind(' ');
  return Value((space == std::string::npos ? head : head.substr(0, space)) + end);
}

Value f_format(const Value& v, ArgReader& r) {
  std::vector<Value> args;
  for (size_t i = 0; i < r.positional(); ++i) args.push_back(r.get(i, ""));
  return Value(percent_format(v.str(), Value::list(std::move(args), true)));
}

// Jinja's attr looks up attributes only (methods, namespace fields), never dict keys.
Value f_attr(const Value& v, ArgReader& r) {
  std::string name = r.get(0, "name").str();
  if (v.is_dict()) {
    Value a = get_attr(v, name);
    return a.is_callable() ? a : missing(v, Value(name));
  }
  return get_attr(v, name);
}

const std::map<std::string, Filter, std::less<>>& filters() {
  static const std::map<std::string, Filter, std::less<>> by_name = {
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"length", f_length},
      {"count", f_length},
      {"first", f_first},
      {"last", f_last},
      {"join", f_join},
      {"default", f_default},
      {"d", f_default},
      {"upper", f_upper},
      {"lower", f_lower},
      {"title", f_title},
      {"capitalize", f_capitalize},
      {"replace", f_replace},
      {"string", f_string},
      {"int", f_int},
      {"float", f_float},
      {"list", f_list},
      {"items", f_items},
      {"dictsort", f_dictsort},
      {"map", f_map},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"unique", f_unique},
      {"indent", f_indent},
      {"round", f_round},
      {"abs", f_abs},
      {"sum", f_sum},
      {"min", f_min},
      {"max", f_max},
      {"batch", f_batch},
      {"safe", f_safe},
      {"e", f_escape},
      {"escape", f_escape},
      {"forceescape", f_escape},
      {"wordcount", f_wordcount},
      {"reverse", f_reverse},
      {"sort", f_sort},
      {"center", f_center},
      {"attr", f_attr},
      {"truncate", f_truncate},
      {"format", f_format},
  };
  return by_name;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  auto it = filters().find(name);
  SY_CHECK(it != filters().end(), "no filter named '{}'", name);
  ArgReader r(name, args);
  Value out = it->second(subject, r);
  r.done();
  return out;
}

}  // namespace sy::text::jinja
