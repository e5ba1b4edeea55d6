// Python string formatting for templates: str.format ("{} {name}") and printf-style `"%s" % x`.
#include <algorithm>
#include <cstdio>

#include "base/check.h"
#include "text/jinja/builtins.h"
#include "text/jinja/strings.h"

namespace sy::text::jinja {
namespace {

std::string pad(const std::string& s, int width, bool left) {
  auto n = static_cast<int>(str::length(s));
  if (width <= n) return s;
  std::string fill(static_cast<size_t>(width - n), ' ');
  return left ? s + fill : fill + s;
}

}  // namespace

std::string str_format(const std::string& fmt_str, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    char c = fmt_str[i];
    if (c == '{' && i + 1 < fmt_str.size() && fmt_str[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < fmt_str.size() && fmt_str[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      size_t e = fmt_str.find('}', i);
      SY_CHECK(e != std::string::npos, "Single '{{' encountered in format string");
      std::string field = fmt_str.substr(i + 1, e - i - 1);
      SY_CHECK(field.find_first_of(":!") == std::string::npos, "format specs in str.format are not supported");
      Value v;
      if (field.empty()) {
        SY_CHECK(auto_index < a.pos.size(), "Replacement index {} out of range for positional args tuple", auto_index);
        v = a.pos[auto_index++];
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        size_t k = std::stoul(field);
        SY_CHECK(k < a.pos.size(), "Replacement index {} out of range for positional args tuple", k);
        v = a.pos[k];
      } else {
        auto it = std::find_if(a.kw.begin(), a.kw.end(), [&](const auto& kv) { return kv.first == field; });
        SY_CHECK(it != a.kw.end(), "'{}'", field);
        v = it->second;
      }
      out += v.str();
      i = e;
    } else {
      SY_CHECK(c != '}', "Single '}}' encountered in format string");
      out.push_back(c);
    }
  }
  return out;
}

std::string percent_format(const std::string& f, const Value& args) {
  std::vector<Value> positional;
  bool mapping_args = args.is_dict();
  if (args.is_tuple()) {
    positional = args.items();
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    SY_CHECK(++i < f.size(), "incomplete format");
    Value arg;
    bool have_arg = false;
    if (f[i] == '(') {
      size_t e = f.find(')', i);
      SY_CHECK(e != std::string::npos, "incomplete format key");
      SY_CHECK(mapping_args, "format requires a mapping");
      const Value* v = args.dict_data().find(std::string_view(f).substr(i + 1, e - i - 1));
      SY_CHECK(v, "'{}'", f.substr(i + 1, e - i - 1));
      arg = *v;
      have_arg = used_mapping = true;
      i = e + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) flags.push_back(f[i++]);
    int width = 0, precision = -1;
    while (i < f.size() && f[i] >= '0' && f[i] <= '9') width = width * 10 + (f[i++] - '0');
    if (i < f.size() && f[i] == '.') {
      precision = 0;
      ++i;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') precision = precision * 10 + (f[i++] - '0');
    }
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    SY_CHECK(i < f.size(), "incomplete format");
    char type = f[i];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_arg) {
      SY_CHECK(next < positional.size(), "not enough arguments for format string");
      arg = positional[next++];
    }
    bool left = flags.find('-') != std::string::npos;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = type == 's' ? arg.str() : arg.repr();
        if (precision >= 0) {
          auto cps = str::decode(s);
          s = str::encode(cps, 0, std::min(cps.size(), static_cast<size_t>(precision)));
        }
        out += pad(s, width, left);
        break;
      }
      case 'c': {
        std::string s;
        if (arg.is_string()) {
          SY_CHECK(str::length(arg.as_string()) == 1, "%c requires an int or a unicode character");
          s = arg.as_string();
        } else {
          SY_CHECK(arg.is_int(), "%c requires an int or a unicode character, not {}", arg.type_name());
          str::append_utf8(s, static_cast<char32_t>(arg.as_int()));
        }
        out += pad(s, width, left);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'o':
      case 'x':
      case 'X': {
        bool integral_only = type == 'o' || type == 'x' || type == 'X';
        SY_CHECK(arg.is_number() && !(integral_only && arg.is_float()), "%{} format: {} is required, not {}", type,
                 integral_only ? "an integer" : "a real number", arg.type_name());
        auto v = arg.is_float() ? static_cast<long long>(arg.as_float()) : static_cast<long long>(arg.to_int());
        std::string spec =
            fmt::format("%{}{}{}ll{}", flags, width ? std::to_string(width) : "",
                        precision >= 0 ? fmt::format(".{}", precision) : "", type == 'i' || type == 'u' ? 'd' : type);
        char buf[128];
        std::snprintf(buf, sizeof buf, spec.c_str(), v);
        std::string s = buf;
        if (type == 'o' && flags.find('#') != std::string::npos) s = str::replace(s, "0", "0o", 1);
        out += s;
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        SY_CHECK(arg.is_number(), "must be real number, not {}", arg.type_name());
        std::string spec =
            fmt::format("%{}{}.{}{}", flags, width ? std::to_string(width) : "", precision >= 0 ? precision : 6, type);
        char buf[512];
        std::snprintf(buf, sizeof buf, spec.c_str(), arg.to_double());
        out += buf;
        break;
      }
      default:
        SY_FAIL("unsupported format character '{}'", type);
    }
  }
  SY_CHECK(used_mapping || mapping_args || next == positional.size(),
           "not all arguments converted during string formatting");
  return out;
}

}  // namespace sy::text::jinja
