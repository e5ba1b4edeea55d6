// Template values: construction, Python str/repr/==/<, float repr, JSON in and out (json.dumps layout).
#include "text/jinja/value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/check.h"
#include "text/jinja/strings.h"

namespace sy::text::jinja {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (k.equals(key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

Value Object::get_attr(std::string_view name) const { return Value::undefined(std::string(name)); }
bool Object::set_attr(const std::string&, Value) { return false; }
std::string Object::repr() const { return fmt::format("<{} object>", type_name()); }

int Value::depth() const {
  if (is_list()) return list_data().depth;
  if (is_dict()) return dict_data().depth;
  return 0;
}

namespace {

std::shared_ptr<const ListData> build_list(std::vector<Value> items, bool tuple, bool iterator) {
  auto data = std::make_shared<ListData>();
  int depth = 0;
  for (const auto& v : items) depth = std::max(depth, v.depth());
  SY_CHECK(depth < kMaxValueDepth, "lists and dicts nested deeper than {} levels", kMaxValueDepth);
  data->items = std::move(items);
  data->tuple = tuple;
  data->iterator = iterator;
  data->depth = depth + 1;
  return data;
}

}  // namespace

Value Value::list(std::vector<Value> items, bool tuple) { return Value(build_list(std::move(items), tuple, false)); }
Value Value::iterator(std::vector<Value> items) { return Value(build_list(std::move(items), false, true)); }

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  auto data = std::make_shared<DictData>();
  int depth = 0;
  for (auto& [k, v] : items) {
    depth = std::max({depth, k.depth(), v.depth()});
    bool replaced = false;
    for (auto& [k2, v2] : data->items) {
      if (k2.equals(k)) {
        v2 = std::move(v);
        replaced = true;
        break;
      }
    }
    if (!replaced) data->items.emplace_back(std::move(k), std::move(v));
  }
  SY_CHECK(depth < kMaxValueDepth, "lists and dicts nested deeper than {} levels", kMaxValueDepth);
  data->depth = depth + 1;
  return Value(std::shared_ptr<const DictData>(std::move(data)));
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)}));
}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  SY_CHECK(depth < kMaxValueDepth, "input JSON nested deeper than {} levels", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return none();
    case nlohmann::json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::json::value_t::binary:
      SY_FAIL("binary JSON values are not template values");
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      for (const auto& [k, v] : j.items()) items.emplace_back(Value(k), from_json(v, depth + 1));
      return dict(std::move(items));
    }
  }
  SY_FAIL("unknown JSON value type");
}

double Value::to_double() const {
  switch (kind()) {
    case Kind::boolean:
      return as_bool() ? 1.0 : 0.0;
    case Kind::integer:
      return static_cast<double>(as_int());
    case Kind::floating:
      return as_float();
    default:
      SY_FAIL("expected a number, got {}", type_name());
  }
}

int64_t Value::to_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  SY_CHECK(is_int(), "expected an integer, got {}", type_name());
  return as_int();
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return as_bool();
    case Kind::integer:
      return as_int() != 0;
    case Kind::floating:
      return as_float() != 0.0;
    case Kind::string:
      return !as_string().empty();
    case Kind::list:
      return is_iterator() || !items().empty();
    case Kind::dict:
      return !dict_data().items.empty();
    case Kind::object:
    case Kind::callable:
      return true;
  }
  return false;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits.push_back(c);
  int exp10 = std::stoi(std::string(sci.substr(e + 1)));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  int n = static_cast<int>(digits.size());
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(decpt - n, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  int x = decpt - 1;
  out += x < 0 ? "e-" : "e+";
  std::string xs = std::to_string(std::abs(x));
  if (xs.size() < 2) xs = "0" + xs;
  return out + xs;
}

std::string string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : str::decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      bool printable =
          c == ' ' || !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CS ||
                        cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZL ||
                        cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
      if (printable) {
        str::append_utf8(out, c);
      } else if (c < 0x100) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      } else {
        out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
      }
    }
  }
  out.push_back(q);
  return out;
}

std::string Value::str() const {
  switch (kind()) {
    case Kind::undefined:
      return "";
    case Kind::string:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "None";
    case Kind::boolean:
      return as_bool() ? "True" : "False";
    case Kind::integer:
      return std::to_string(as_int());
    case Kind::floating:
      return float_repr(as_float());
    case Kind::string:
      return string_repr(as_string());
    case Kind::list: {
      const auto& l = list_data();
      if (l.iterator) return "<generator object>";
      std::string out = l.tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].repr();
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      return out + (l.tuple ? ")" : "]");
    }
    case Kind::dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_data().items) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::object:
      return object().repr();
    case Kind::callable:
      return callable_data().is_macro ? "<Macro '" + callable_data().name + "'>"
                                      : "<built-in function " + callable_data().name + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::list:
      return is_iterator() ? "generator" : is_tuple() ? "tuple" : "list";
    case Kind::dict:
      return "dict";
    case Kind::object:
      return object().type_name();
    case Kind::callable:
      return callable_data().is_macro ? "Macro" : "builtin_function_or_method";
  }
  return "";
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (is_float() || o.is_float()) return to_double() == o.to_double();
    return to_int() == o.to_int();
  }
  if (kind() != o.kind()) return false;
  switch (kind()) {
    case Kind::undefined:
    case Kind::none:
      return true;
    case Kind::string:
      return as_string() == o.as_string();
    case Kind::list: {
      if (is_iterator() || o.is_iterator()) return same(o);
      if (is_tuple() != o.is_tuple() || items().size() != o.items().size()) return false;
      for (size_t i = 0; i < items().size(); ++i)
        if (!items()[i].equals(o.items()[i])) return false;
      return true;
    }
    case Kind::dict: {
      const auto& a = dict_data().items;
      if (a.size() != o.dict_data().items.size()) return false;
      for (const auto& [k, v] : a) {
        const Value* w = o.dict_data().find(k);
        if (!w || !v.equals(*w)) return false;
      }
      return true;
    }
    default:
      return same(o);
  }
}

bool Value::same(const Value& o) const {
  if (kind() != o.kind()) return false;
  switch (kind()) {
    case Kind::undefined:
    case Kind::none:
      return true;
    case Kind::boolean:
      return as_bool() == o.as_bool();
    case Kind::integer:
      return as_int() == o.as_int();  // CPython caches small ints; equal ints compare as the same here
    case Kind::floating:
      return as_float() == o.as_float();
    case Kind::string:
      return as_string() == o.as_string();
    case Kind::list:
      return &list_data() == &o.list_data();
    case Kind::dict:
      return &dict_data() == &o.dict_data();
    case Kind::object:
      return &object() == &o.object();
    case Kind::callable:
      return &callable_data() == &o.callable_data();
  }
  return false;
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.to_double(), y = b.to_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.to_int(), y = b.to_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].equals(y[i])) continue;
      return compare_values(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  SY_FAIL("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

namespace {

void json_char(std::string& out, char32_t c, bool ensure_ascii) {
  switch (c) {
    case '"':
      out += "\\\"";
      return;
    case '\\':
      out += "\\\\";
      return;
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    case '\b':
      out += "\\b";
      return;
    case '\f':
      out += "\\f";
      return;
    default:
      break;
  }
  if (c < 0x20 || (ensure_ascii && c >= 0x7F && c < 0x10000)) {
    out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
  } else if (ensure_ascii && c >= 0x10000) {
    char32_t v = c - 0x10000;  // a surrogate pair, as json.dumps writes astral code points
    out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                       static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
  } else {
    str::append_utf8(out, c);
  }
}

// json.dumps' string encoding: ensure_ascii=False keeps non-ASCII text as is.
void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  if (ensure_ascii) {
    for (char32_t c : str::decode(s)) json_char(out, c, true);
  } else {
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      if (c < 0x80) {
        json_char(out, c, false);
      } else {
        out.push_back(ch);
      }
    }
  }
  out.push_back('"');
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::string:
      return k.as_string();
    case Value::Kind::none:
      return "null";
    case Value::Kind::boolean:
      return k.as_bool() ? "true" : "false";
    case Value::Kind::integer:
      return std::to_string(k.as_int());
    case Value::Kind::floating:
      return float_repr(k.as_float());
    default:
      SY_FAIL("keys must be str, int, float, bool or None, not {}", k.type_name());
  }
}

void json_value(std::string& out, const Value& v, const JsonStyle& st, int level) {
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += st.indent_str;
  };
  bool indented = st.indent >= 0;
  switch (v.kind()) {
    case Value::Kind::none:
      out += "null";
      return;
    case Value::Kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::integer:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::floating: {
      double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::string:
      json_string(out, v.as_string(), st.ensure_ascii);
      return;
    case Value::Kind::list: {
      if (v.is_iterator()) SY_FAIL("Object of type generator is not JSON serializable");
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += st.item_sep;
        if (indented) newline(level + 1);
        json_value(out, items[i], st, level + 1);
      }
      if (indented) newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::dict: {
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, val] : v.dict_data().items) items.emplace_back(json_key(k), &val);
      if (st.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      if (items.empty()) {
        out += "{}";
        return;
      }
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += st.item_sep;
        if (indented) newline(level + 1);
        json_string(out, items[i].first, st.ensure_ascii);
        out += st.key_sep;
        json_value(out, *items[i].second, st, level + 1);
      }
      if (indented) newline(level);
      out.push_back('}');
      return;
    }
    case Value::Kind::undefined:
    case Value::Kind::object:
    case Value::Kind::callable:
      SY_FAIL("Object of type {} is not JSON serializable", v.type_name());
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  JsonStyle st = style;
  if (st.indent > 0 && st.indent_str.empty()) st.indent_str = std::string(st.indent, ' ');
  std::string out;
  json_value(out, v, st, 0);
  return out;
}

}  // namespace sy::text::jinja
