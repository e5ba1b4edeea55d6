// Jinja's tests (`x is defined`, `x is divisibleby 3`, ...) as jinja2/tests.py defines them.
#include <map>

#include "base/check.h"
#include "text/jinja/builtins.h"
#include "text/jinja/strings.h"

namespace sy::text::jinja {
namespace {

using Test = bool (*)(const Value&, ArgReader&);

bool t_defined(const Value& v, ArgReader&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, ArgReader&) { return v.is_undefined(); }
bool t_none(const Value& v, ArgReader&) { return v.is_none(); }
bool t_boolean(const Value& v, ArgReader&) { return v.is_bool(); }
bool t_true(const Value& v, ArgReader&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, ArgReader&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v, ArgReader&) { return v.is_int(); }
bool t_float(const Value& v, ArgReader&) { return v.is_float(); }
bool t_number(const Value& v, ArgReader&) { return v.is_number(); }
bool t_string(const Value& v, ArgReader&) { return v.is_string(); }
bool t_mapping(const Value& v, ArgReader&) { return v.is_dict(); }
bool t_sequence(const Value& v, ArgReader&) {
  return v.is_undefined() || v.is_string() || v.is_dict() || (v.is_list() && !v.is_iterator());
}
bool t_iterable(const Value& v, ArgReader&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }
bool t_callable(const Value& v, ArgReader&) { return v.is_callable() || v.is_undefined(); }
bool t_escaped(const Value&, ArgReader&) { return false; }

bool t_lower(const Value& v, ArgReader&) { return str::is_lower_str(v.str()); }
bool t_upper(const Value& v, ArgReader&) { return str::is_upper_str(v.str()); }

Value mod(const Value& v, const Value& by) { return binary_op("%", v, by); }
bool t_even(const Value& v, ArgReader&) { return mod(v, Value(2)).equals(Value(0)); }
bool t_odd(const Value& v, ArgReader&) { return mod(v, Value(2)).equals(Value(1)); }
bool t_divisibleby(const Value& v, ArgReader& r) { return mod(v, r.get(0, "num")).equals(Value(0)); }

bool t_sameas(const Value& v, ArgReader& r) { return v.same(r.get(0, "other")); }
bool t_in(const Value& v, ArgReader& r) { return contains(r.get(0, "seq"), v); }
bool t_eq(const Value& v, ArgReader& r) { return v.equals(r.get(0, "b")); }
bool t_ne(const Value& v, ArgReader& r) { return !v.equals(r.get(0, "b")); }

int cmp(const Value& v, ArgReader& r) {
  Value b = r.get(0, "b");
  check_defined(v);
  check_defined(b);
  return compare_values(v, b);
}
bool t_lt(const Value& v, ArgReader& r) { return cmp(v, r) < 0; }
bool t_le(const Value& v, ArgReader& r) { return cmp(v, r) <= 0; }
bool t_gt(const Value& v, ArgReader& r) { return cmp(v, r) > 0; }
bool t_ge(const Value& v, ArgReader& r) { return cmp(v, r) >= 0; }

bool t_filter(const Value& v, ArgReader&) { return v.is_string() && has_filter(v.as_string()); }
bool t_test(const Value& v, ArgReader&) { return v.is_string() && has_test(v.as_string()); }

const std::map<std::string, Test, std::less<>>& tests() {
  static const std::map<std::string, Test, std::less<>> by_name = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"sequence", t_sequence},
      {"iterable", t_iterable},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"lower", t_lower},
      {"upper", t_upper},
      {"even", t_even},
      {"odd", t_odd},
      {"divisibleby", t_divisibleby},
      {"sameas", t_sameas},
      {"in", t_in},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"filter", t_filter},
      {"test", t_test},
  };
  return by_name;
}

}  // namespace

bool has_test(const std::string& name) { return tests().count(name) != 0; }

bool apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  auto it = tests().find(name);
  SY_CHECK(it != tests().end(), "no test named '{}'", name);
  ArgReader r(name, args);
  bool out = it->second(subject, r);
  r.done();
  return out;
}

}  // namespace sy::text::jinja
