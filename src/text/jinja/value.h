// Template values with Python semantics: undefined, None, bool, int, float, str, list/tuple, dict (insertion
// ordered), objects (namespace, loop) and callables (macros, globals, bound methods).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sy::text::jinja {

class Value;

// Lists and dicts are immutable once built (the sandbox forbids append, update, ...), so values share them.
struct ListData {
  std::vector<Value> items;
  bool tuple = false;
  // A generator or iterator (what select, map, reverse, items ... return): iterable, always true, without
  // len() or indexing.
  bool iterator = false;
  int depth = 1;  // nesting depth, bounded so that printing and destruction cannot overflow the stack
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order
  int depth = 1;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
};

// Arguments of a call: positional, then keyword in call order.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
  bool is_macro = false;
};

// Attribute-bearing objects: namespace() and the loop variable.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // Attribute lookup; returns an undefined value when there is none.
  virtual Value get_attr(std::string_view name) const;
  // Returns false when the object does not take attribute assignment.
  virtual bool set_attr(const std::string& name, Value value);
  virtual std::string repr() const;
};

struct Undefined {
  std::string hint;  // what was looked up, for "'x' is undefined"
};

class Value {
 public:
  enum class Kind : uint8_t { undefined, none, boolean, integer, floating, string, list, dict, object, callable };

  Value() : v_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(std::monostate{}); }
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::shared_ptr<const ListData> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<const DictData> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Object> o) : v_(std::move(o)) {}
  Value(std::shared_ptr<const Callable> c) : v_(std::move(c)) {}

  static Value list(std::vector<Value> items, bool tuple = false);
  static Value iterator(std::vector<Value> items);
  static Value dict(std::vector<std::pair<Value, Value>> items);  // later duplicates replace earlier keys
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn);
  // JSON input (messages, tools, kwargs) to values; `depth` bounds nesting.
  static Value from_json(const nlohmann::ordered_json& j, int depth = 0);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_bool() const { return kind() == Kind::boolean; }
  bool is_int() const { return kind() == Kind::integer; }
  bool is_float() const { return kind() == Kind::floating; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::string; }
  bool is_list() const { return kind() == Kind::list; }
  bool is_tuple() const { return is_list() && list_data().tuple; }
  bool is_iterator() const { return is_list() && list_data().iterator; }
  bool is_dict() const { return kind() == Kind::dict; }
  bool is_object() const { return kind() == Kind::object; }
  bool is_callable() const { return kind() == Kind::callable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // Numbers (bool, int, float) as double / int (bool counts as int, as in Python).
  double to_double() const;
  int64_t to_int() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListData& list_data() const { return *std::get<std::shared_ptr<const ListData>>(v_); }
  const std::vector<Value>& items() const { return list_data().items; }
  const DictData& dict_data() const { return *std::get<std::shared_ptr<const DictData>>(v_); }
  Object& object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  const std::shared_ptr<Object>& object_ptr() const { return std::get<std::shared_ptr<Object>>(v_); }
  const Callable& callable_data() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  int depth() const;

  // Python's truthiness, str(), repr() and type(x).__name__.
  bool truthy() const;
  std::string str() const;
  std::string repr() const;
  std::string type_name() const;
  // Python ==, and identity as `is` / `sameas` sees it.
  bool equals(const Value& other) const;
  bool same(const Value& other) const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(std::monostate n) : v_(n) {}
  std::variant<Undefined, std::monostate, bool, int64_t, double, std::string, std::shared_ptr<const ListData>,
               std::shared_ptr<const DictData>, std::shared_ptr<Object>, std::shared_ptr<const Callable>>
      v_;
};

// Python's `a < b` (numbers, strings, lists/tuples of comparable items); throws on other types.
int compare_values(const Value& a, const Value& b);
// Python's repr of a float ("1.0", "1e-05", "inf").
std::string float_repr(double d);
// Python's repr of a str (quotes chosen as Python does).
std::string string_repr(std::string_view s);
// json.dumps(x, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as transformers' tojson.
struct JsonStyle {
  int indent = -1;         // -1: None (one line); an indent given as a string sets 0 and indent_str
  std::string indent_str;  // one level of indentation
  std::string item_sep;
  std::string key_sep;
  bool sort_keys = false;
  bool ensure_ascii = false;  // non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
};
std::string to_json(const Value& v, const JsonStyle& style);

// The maximum nesting of lists and dicts a template may build or receive.
inline constexpr int kMaxValueDepth = 256;

}  // namespace sy::text::jinja
