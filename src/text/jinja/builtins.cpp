// Lookups, iteration, Python operators, methods of str/dict/list, tests and global functions (see builtins.h).
#include "text/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

#include "base/check.h"
#include "text/jinja/strings.h"

namespace sy::text::jinja {
namespace {

// The sandbox refuses ranges longer than this (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;
// Strings and lists built by * or + may not exceed this many elements / bytes.
constexpr size_t kMaxBuilt = size_t{1} << 28;

std::optional<std::string> opt_string(const Value& v, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  SY_CHECK(v.is_string(), "{} must be None or a string, not {}", what, v.type_name());
  return v.as_string();
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  auto one = [&](const Value& a) {
    SY_CHECK(a.is_string(), "{} first arg must be str or a tuple of str, not {}", start ? "startswith" : "endswith",
             a.type_name());
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) return std::any_of(affix.items().begin(), affix.items().end(), one);
  return one(affix);
}

Value string_method(const std::string& s, const std::string& name) {
  auto m = [&](auto fn) {
    return Value::callable(name, [s, name, fn](CallArgs& a) -> Value {
      ArgReader r(name, a);
      Value v = fn(r);
      r.done();
      return v;
    });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return m([=](ArgReader& r) { return Value(str::strip(s, opt_string(r.get(0, ""), "chars"), left, right)); });
  }
  if (name == "split") {
    return m([=](ArgReader& r) {
      Value maxsplit = r.get(1, "maxsplit", Value(-1));
      auto parts = str::split(s, opt_string(r.get(0, "sep"), "sep"), maxsplit.to_int());
      std::vector<Value> items(parts.begin(), parts.end());
      return Value::list(std::move(items));
    });
  }
  if (name == "splitlines") {
    return m([=](ArgReader&) {
      auto parts = str::splitlines(s);
      return Value::list(std::vector<Value>(parts.begin(), parts.end()));
    });
  }
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return m([=](ArgReader& r) { return Value(starts_or_ends(s, r.get(0, ""), start)); });
  }
  if (name == "replace") {
    return m([=](ArgReader& r) {
      Value old = r.get(0, ""), with = r.get(1, "");
      SY_CHECK(old.is_string() && with.is_string(), "replace() arguments must be str");
      return Value(str::replace(s, old.as_string(), with.as_string(), r.get(2, "count", Value(-1)).to_int()));
    });
  }
  if (name == "upper") return m([=](ArgReader&) { return Value(str::upper(s)); });
  if (name == "lower") return m([=](ArgReader&) { return Value(str::lower(s)); });
  if (name == "title") return m([=](ArgReader&) { return Value(str::py_title(s)); });
  if (name == "capitalize") return m([=](ArgReader&) { return Value(str::capitalize(s)); });
  if (name == "find" || name == "count" || name == "index" || name == "rfind") {
    return m([=](ArgReader& r) {
      Value sub = r.get(0, "");
      SY_CHECK(sub.is_string(), "must be str, not {}", sub.type_name());
      if (name == "count") return Value(str::count(s, sub.as_string()));
      if (name == "rfind") {
        size_t at = s.rfind(sub.as_string());
        return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(str::length(s.substr(0, at))));
      }
      int64_t at = str::find(s, sub.as_string());
      SY_CHECK(name == "find" || at >= 0, "substring not found");
      return Value(at);
    });
  }
  if (name == "join") {
    return m([=](ArgReader& r) {
      std::string out;
      bool first = true;
      for (const auto& v : iterate(r.get(0, ""))) {
        SY_CHECK(v.is_string(), "sequence item: expected str instance, {} found", v.type_name());
        if (!first) out += s;
        first = false;
        out += v.as_string();
      }
      return Value(out);
    });
  }
  if (name == "format") {
    return Value::callable(name, [s](CallArgs& a) { return Value(str_format(s, a)); });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return m([=](ArgReader& r) {
      Value a = r.get(0, "");
      SY_CHECK(a.is_string(), "must be str, not {}", a.type_name());
      if (!starts_or_ends(s, a, prefix)) return Value(s);
      size_t n = a.as_string().size();
      return Value(prefix ? s.substr(n) : s.substr(0, s.size() - n));
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    return m([=](ArgReader& r) {
      int64_t width = r.get(0, "").to_int();
      Value fill = r.get(1, "", Value(" "));
      SY_CHECK(fill.is_string() && str::length(fill.as_string()) == 1,
               "The fill character must be exactly one character long");
      auto len = static_cast<int64_t>(str::length(s));
      if (width <= len) return Value(s);
      int64_t marg = width - len;
      int64_t left = name == "ljust" ? 0 : name == "rjust" ? marg : marg / 2 + (marg & width & 1);
      std::string out;
      for (int64_t i = 0; i < left; ++i) out += fill.as_string();
      out += s;
      for (int64_t i = left; i < marg; ++i) out += fill.as_string();
      return Value(out);
    });
  }
  auto all_of = [&](auto pred) {
    return m([=](ArgReader&) {
      auto cps = str::decode(s);
      return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred));
    });
  };
  if (name == "isspace") return all_of([](char32_t c) { return str::is_space(c); });
  if (name == "isdigit") return all_of([](char32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha") return all_of([](char32_t c) { return str::is_alpha(c); });
  if (name == "isalnum") return all_of([](char32_t c) { return str::is_alpha(c) || (c >= '0' && c <= '9'); });
  if (name == "isupper") return m([=](ArgReader&) { return Value(str::is_upper_str(s)); });
  if (name == "islower") return m([=](ArgReader&) { return Value(str::is_lower_str(s)); });
  return Value();
}

Value dict_method(const Value& d, const std::string& name) {
  auto m = [&](auto fn) {
    return Value::callable(name, [d, name, fn](CallArgs& a) -> Value {
      ArgReader r(name, a);
      Value v = fn(r);
      r.done();
      return v;
    });
  };
  if (name == "items") {
    return m([=](ArgReader&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict_data().items) out.push_back(Value::list({k, v}, true));
      return Value::list(std::move(out));
    });
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return m([=](ArgReader&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict_data().items) out.push_back(keys ? k : v);
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return m([=](ArgReader& r) {
      Value key = r.get(0, ""), fallback = r.get(1, "", Value::none());
      const Value* v = d.dict_data().find(key);
      return v ? *v : fallback;
    });
  }
  if (name == "copy") return m([=](ArgReader&) { return d; });
  return Value();
}

Value list_method(const Value& l, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::callable(name, [l, name](CallArgs& a) -> Value {
      ArgReader r(name, a);
      Value x = r.get(0, "");
      r.done();
      int64_t n = 0;
      for (size_t i = 0; i < l.items().size(); ++i) {
        if (!l.items()[i].equals(x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      SY_CHECK(name == "count", "{} is not in list", x.repr());
      return Value(n);
    });
  }
  return Value();
}

// Jinja's object_type_repr: "None", "dict object", "str object", ...
std::string object_type_repr(const Value& obj) {
  if (obj.is_none()) return "None";
  if (obj.is_object())
    return "jinja2." + std::string(obj.type_name() == "Namespace" ? "utils." : "runtime.") + obj.type_name() +
           " object";
  return obj.type_name() + " object";
}

bool is_mutating(const Value& obj, const std::string& name) {
  static const std::vector<std::string> kList = {"append", "extend", "insert", "pop",
                                                 "remove", "clear",  "sort",   "reverse"};
  static const std::vector<std::string> kDict = {"pop", "popitem", "setdefault", "update", "clear"};
  const auto& names = obj.is_dict() ? kDict : kList;
  return (obj.is_dict() || (obj.is_list() && !obj.is_tuple())) &&
         std::find(names.begin(), names.end(), name) != names.end();
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name()));
}

// Python's slice.indices for a sequence of length n.
void slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step, int64_t& b, int64_t& e,
                   int64_t& st) {
  auto as_index = [](const Value& v) {
    SY_CHECK(v.is_int() || v.is_bool(), "slice indices must be integers or None, not {}", v.type_name());
    return v.to_int();
  };
  st = step.is_none() ? 1 : as_index(step);
  SY_CHECK(st != 0, "slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = as_index(v);
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  b = clamp(start, st < 0 ? n - 1 : 0);
  e = clamp(stop, st < 0 ? -1 : n);
}

}  // namespace

Value missing(const Value& obj, const Value& key) {
  if (key.is_string()) {
    return Value::undefined(fmt::format("{} has no attribute {}", string_repr(object_type_repr(obj)), key.repr()));
  }
  return Value::undefined(fmt::format("{} has no element {}", string_repr(object_type_repr(obj)), key.repr()));
}

void check_defined(const Value& v) {
  if (v.is_undefined()) SY_FAIL("{}", v.undefined_hint());
}

Value get_attr(const Value& obj, const std::string& name) {
  check_defined(obj);
  switch (obj.kind()) {
    case Value::Kind::dict: {
      if (is_mutating(obj, name)) return unsafe(obj, name);
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.dict_data().find(std::string_view(name))) return *v;
      return missing(obj, Value(name));
    }
    case Value::Kind::string: {
      Value m = string_method(obj.as_string(), name);
      if (!m.is_undefined()) return m;
      break;
    }
    case Value::Kind::list: {
      if (is_mutating(obj, name)) return unsafe(obj, name);
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      break;
    }
    case Value::Kind::object:
      return obj.object().get_attr(name);
    default:
      break;
  }
  return missing(obj, Value(name));
}

Value get_item(const Value& obj, const Value& key) {
  check_defined(obj);
  SY_CHECK(!obj.is_iterator(), "'generator' object is not subscriptable");
  switch (obj.kind()) {
    case Value::Kind::dict:
      if (const Value* v = obj.dict_data().find(key)) return *v;
      break;
    case Value::Kind::list:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.to_int(), n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
        return missing(obj, key);
      }
      break;
    case Value::Kind::string:
      if (key.is_int() || key.is_bool()) {
        auto cps = str::decode(obj.as_string());
        int64_t i = key.to_int(), n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(str::encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
        return missing(obj, key);
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    Value v = get_attr(obj, key.as_string());
    if (!v.is_undefined() || obj.is_object()) return v;
  }
  return missing(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  check_defined(obj);
  SY_CHECK(!obj.is_iterator(), "'generator' object is not subscriptable");
  int64_t b, e, st;
  if (obj.is_list()) {
    const auto& items = obj.items();
    slice_indices(static_cast<int64_t>(items.size()), start, stop, step, b, e, st);
    std::vector<Value> out;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.is_tuple());
  }
  if (obj.is_string()) {
    auto cps = str::decode(obj.as_string());
    slice_indices(static_cast<int64_t>(cps.size()), start, stop, step, b, e, st);
    std::string out;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) str::append_utf8(out, cps[static_cast<size_t>(i)]);
    return Value(out);
  }
  return Value::undefined(fmt::format("'{}' object is not subscriptable", obj.type_name()));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
      return v.items();
    case Value::Kind::dict: {
      std::vector<Value> keys;
      for (const auto& [k, val] : v.dict_data().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::string: {
      std::vector<Value> out;
      std::string one;
      for (char32_t c : str::decode(v.as_string())) {
        one.clear();
        str::append_utf8(one, c);
        out.emplace_back(one);
      }
      return out;
    }
    default:
      SY_FAIL("'{}' object is not iterable", v.type_name());
  }
}

bool contains(const Value& c, const Value& item) {
  switch (c.kind()) {
    case Value::Kind::undefined:
      return false;
    case Value::Kind::string:
      check_defined(item);
      SY_CHECK(item.is_string(), "'in <string>' requires string as left operand, not {}", item.type_name());
      return c.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::list:
      return std::any_of(c.items().begin(), c.items().end(), [&](const Value& v) { return v.equals(item); });
    case Value::Kind::dict:
      return c.dict_data().find(item) != nullptr;
    default:
      SY_FAIL("argument of type '{}' is not iterable", c.type_name());
  }
}

namespace {

Value int_result(__int128 r) {
  SY_CHECK(r >= std::numeric_limits<int64_t>::min() && r <= std::numeric_limits<int64_t>::max(),
           "integer overflow (results beyond 64 bits are not supported)");
  return Value(static_cast<int64_t>(r));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    SY_CHECK(seq.as_string().size() * static_cast<size_t>(n) <= kMaxBuilt, "string repetition too large");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(out);
  }
  SY_CHECK(seq.items().size() * static_cast<size_t>(n) <= kMaxBuilt, "list repetition too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.is_tuple());
}

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  SY_FAIL("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.str() + b.str());
  check_defined(a);
  check_defined(b);
  bool nums = a.is_number() && b.is_number();
  bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return int_result(static_cast<__int128>(a.to_int()) + b.to_int());
    if (nums) return Value(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (a.is_string() || b.is_string()) {
      SY_FAIL("can only concatenate str (not \"{}\") to str", a.is_string() ? b.type_name() : a.type_name());
    }
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) return int_result(static_cast<__int128>(a.to_int()) - b.to_int());
    if (nums) return Value(a.to_double() - b.to_double());
    unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) return int_result(static_cast<__int128>(a.to_int()) * b.to_int());
    if (nums) return Value(a.to_double() * b.to_double());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.to_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.to_int());
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    SY_CHECK(b.to_double() != 0, "division by zero");
    return Value(a.to_double() / b.to_double());
  }
  if (op == "//") {
    if (!nums) unsupported("//", a, b);
    if (ints) {
      int64_t x = a.to_int(), y = b.to_int();
      SY_CHECK(y != 0, "integer division or modulo by zero");
      SY_CHECK(!(x == std::numeric_limits<int64_t>::min() && y == -1), "integer overflow");
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value(q);
    }
    SY_CHECK(b.to_double() != 0, "float floor division by zero");
    return Value(std::floor(a.to_double() / b.to_double()));
  }
  if (op == "%") {
    if (a.is_string()) return Value(percent_format(a.as_string(), b));
    if (!nums) unsupported("%", a, b);
    if (ints) {
      int64_t x = a.to_int(), y = b.to_int();
      SY_CHECK(y != 0, "integer division or modulo by zero");
      if (y == -1) return Value(int64_t{0});
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    SY_CHECK(b.to_double() != 0, "float modulo");
    return Value(py_fmod(a.to_double(), b.to_double()));
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (ints && b.to_int() >= 0) {
      __int128 r = 1, base = a.to_int();
      for (int64_t e = b.to_int(); e > 0; --e) {
        r *= base;
        SY_CHECK(r >= std::numeric_limits<int64_t>::min() && r <= std::numeric_limits<int64_t>::max(),
                 "integer overflow (results beyond 64 bits are not supported)");
        if (r == 0 || r == 1) break;
      }
      return Value(static_cast<int64_t>(r));
    }
    SY_CHECK(!(a.to_double() == 0 && b.to_double() < 0), "0.0 cannot be raised to a negative power");
    return Value(std::pow(a.to_double(), b.to_double()));
  }
  SY_FAIL("unknown operator '{}'", op);
}

Value ArgReader::get(size_t pos, std::string_view kw, Value fallback) {
  if (pos < args_.pos.size()) {
    max_pos_ = std::max(max_pos_, pos + 1);
    return args_.pos[pos];
  }
  if (!kw.empty()) {
    for (size_t i = 0; i < args_.kw.size(); ++i) {
      if (args_.kw[i].first == kw) {
        used_kw_[i] = true;
        return args_.kw[i].second;
      }
    }
  }
  return fallback;
}

bool ArgReader::has(size_t pos, std::string_view kw) const {
  if (pos < args_.pos.size()) return true;
  return std::any_of(args_.kw.begin(), args_.kw.end(), [&](const auto& p) { return p.first == kw; });
}

void ArgReader::done() const {
  SY_CHECK(args_.pos.size() <= max_pos_, "{}() takes at most {} positional argument(s) ({} given)", fn_, max_pos_,
           args_.pos.size());
  for (size_t i = 0; i < used_kw_.size(); ++i) {
    SY_CHECK(used_kw_[i], "{}() got an unexpected keyword argument '{}'", fn_, args_.kw[i].first);
  }
}

std::vector<std::pair<std::string, Value>> global_functions() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back(
      "range", Value::callable("range", [](CallArgs& a) -> Value {
        SY_CHECK(a.kw.empty(), "range() takes no keyword arguments");
        SY_CHECK(!a.pos.empty() && a.pos.size() <= 3, "range expected 1 to 3 arguments, got {}", a.pos.size());
        for (const auto& v : a.pos) {
          SY_CHECK(v.is_int() || v.is_bool(), "'{}' object cannot be interpreted as an integer", v.type_name());
        }
        int64_t start = 0, stop, step = 1;
        if (a.pos.size() == 1) {
          stop = a.pos[0].to_int();
        } else {
          start = a.pos[0].to_int();
          stop = a.pos[1].to_int();
          if (a.pos.size() == 3) step = a.pos[2].to_int();
        }
        SY_CHECK(step != 0, "range() arg 3 must not be zero");
        __int128 n = step > 0 ? (static_cast<__int128>(stop) - start + step - 1) / step
                              : (static_cast<__int128>(start) - stop - step - 1) / -step;
        if (n < 0) n = 0;
        SY_CHECK(n <= kMaxRange, "Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
        std::vector<Value> out;
        for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) out.emplace_back(start + i * step);
        return Value::list(std::move(out));
      }));
  g.emplace_back("dict", Value::callable("dict", [](CallArgs& a) -> Value {
                   std::vector<std::pair<Value, Value>> items;
                   SY_CHECK(a.pos.size() <= 1, "dict expected at most 1 argument, got {}", a.pos.size());
                   if (!a.pos.empty()) {
                     SY_CHECK(a.pos[0].is_dict(), "dict() takes a dict here, got {}", a.pos[0].type_name());
                     items = a.pos[0].dict_data().items;
                   }
                   for (auto& [k, v] : a.kw) items.emplace_back(Value(k), v);
                   return Value::dict(std::move(items));
                 }));
  g.emplace_back("raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Value {
                   ArgReader r("raise_exception", a);
                   Value msg = r.get(0, "message");
                   r.done();
                   throw TemplateRaised{msg.str()};
                 }));
  g.emplace_back("strftime_now", Value::callable("strftime_now", [](CallArgs& a) -> Value {
                   ArgReader r("strftime_now", a);
                   Value f = r.get(0, "format");
                   r.done();
                   SY_CHECK(f.is_string(), "strftime_now() takes a format string, got {}", f.type_name());
                   std::time_t now = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&now, &tm);
                   std::string buf(256 + f.as_string().size() * 8, '\0');
                   size_t n = std::strftime(buf.data(), buf.size(), f.as_string().c_str(), &tm);
                   buf.resize(n);
                   return Value(buf);
                 }));
  return g;
}

}  // namespace sy::text::jinja
