// The Jinja interpreter against Jinja2 (configured as transformers configures it) on a few hundred feature
// cases (tests/fixtures/text/jinja_cases.json, made by tools/text_fixtures/make_jinja_cases.py), and its
// error reporting: template lines in errors, deep nesting refused cleanly.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "base/check.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/parser.h"

namespace sy::text::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string render_text(const std::string& source, const json& context = json::object()) {
  Body body = parse_template(source, "case");
  std::vector<std::pair<std::string, Value>> ctx;
  for (const auto& [k, v] : context.items()) ctx.emplace_back(k, Value::from_json(v));
  return render(body, "case", ctx);
}

std::string quote(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

TEST(Jinja, MatchesJinja2OnFeatureCases) {
  json doc = json::parse(read_text(std::string(SY_SOURCE_DIR) + "/tests/fixtures/text/jinja_cases.json"));
  int compared = 0, failures = 0;
  for (const auto& c : doc["cases"]) {
    const std::string name = c["name"].get<std::string>();
    const std::string tmpl = c["template"].get<std::string>();
    std::string got, error;
    try {
      got = render_text(tmpl, c["context"]);
    } catch (const Error& e) {
      error = e.what();
    }
    ++compared;
    std::string problem;
    if (!c.contains("error")) {
      std::string want = c["output"].get<std::string>();
      if (!error.empty()) {
        problem = "unexpected error: " + error;
      } else if (got != want) {
        problem = "want " + quote(want) + "\n     got  " + quote(got);
      }
    } else {
      std::string kind = c["error"].get<std::string>(), message = c["message"].get<std::string>();
      if (error.empty()) {
        problem = fmt::format("expected a {} error ({}), got {}", kind, message, quote(got));
      } else if (kind == "raised" && !error.ends_with(": " + message)) {
        problem = "expected raise_exception's message " + quote(message) + ", got " + quote(error);
      } else if (kind == "syntax" && c.contains("line") &&
                 error.find(", line " + std::to_string(c["line"].get<int>()) + ":") == std::string::npos) {
        problem = "expected the syntax error at line " + std::to_string(c["line"].get<int>()) + " (" + message +
                  "), got " + quote(error);
      }
    }
    if (!problem.empty()) {
      ++failures;
      ADD_FAILURE() << name << ": " << quote(tmpl) << "\n     " << problem;
    }
  }
  std::cout << compared << " cases compared with Jinja2 " << doc["jinja2"].get<std::string>() << ", " << failures
            << " mismatches\n";
  EXPECT_GT(compared, 200);
}

std::string error_of(const std::string& source, const json& context = json::object()) {
  try {
    render_text(source, context);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Jinja, SyntaxErrorsNameTheTemplateAndLine) {
  EXPECT_EQ(error_of("a\nb\n{% for x in y %}\n{{ x }}\n{% endif %}"), "case, line 5: unexpected 'endif'");
  EXPECT_NE(error_of("line 1\n\n{{ x + }}").find("case, line 3: "), std::string::npos);
  EXPECT_NE(error_of("{% if x %}\n\nno end").find("case, line 3: unexpected end of template"), std::string::npos);
  EXPECT_NE(error_of("\n{{ 'unterminated }}").find("case, line 2: "), std::string::npos);
  EXPECT_NE(error_of("{{ x | nosuchfilter }}").find("No filter named 'nosuchfilter'"), std::string::npos);
}

TEST(Jinja, RenderErrorsNameTheLineAndPassRaiseExceptionThrough) {
  EXPECT_EQ(error_of("ok\n{% if true %}\n{{ raise_exception('Only user and assistant roles') }}{% endif %}"),
            "case, line 3: Only user and assistant roles");
  EXPECT_EQ(error_of("\n\n{{ 1 // 0 }}"), "case, line 3: integer division or modulo by zero");
  EXPECT_EQ(error_of("{{ m.a.b }}", {{"m", json::object()}}), "case, line 1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(error_of("{{ nothing() }}"), "case, line 1: 'nothing' is undefined");
}

TEST(Jinja, DeepNestingIsRefusedCleanly) {
  std::string parens = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_NE(error_of("{{ " + parens + " }}").find("nested deeper than"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 3000; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).find("nested deeper than"), std::string::npos);
  std::string sum = "{{ 1";
  for (int i = 0; i < 5000; ++i) sum += " + 1";
  EXPECT_NE(error_of(sum + " }}").find("nested deeper than"), std::string::npos);
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_NE(error_of(nots + "1 }}").find("nested deeper than"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro calls nested deeper"),
            std::string::npos);
  // A recursive macro whose body nests: each bound holds alone (30 levels a call, 99 calls), their product
  // (about 3000 levels) is refused before the stack runs out (the fuzzer's stack overflow).
  std::string nested = "{{ m(k - 1) }}";
  for (int i = 0; i < 30; ++i) nested = fmt::format("{{% if k > -1 %}}{}{{% endif %}}", nested);
  EXPECT_NE(
      error_of(fmt::format("{{% macro m(k) %}}{{% if k > 0 %}}{}{{% endif %}}{{% endmacro %}}{{{{ m(99) }}}}", nested))
          .find("template evaluation nested deeper than 1000 levels"),
      std::string::npos);
  // Recursion within the bound renders: 20 calls of 10 levels, one 'x' each.
  std::string ten = "x{{ m(k - 1) }}";
  for (int i = 0; i < 10; ++i) ten = fmt::format("{{% if k > -1 %}}{}{{% endif %}}", ten);
  EXPECT_EQ(
      render_text(fmt::format("{{% macro m(k) %}}{{% if k > 0 %}}{}{{% endif %}}{{% endmacro %}}{{{{ m(20) }}}}", ten)),
      std::string(20, 'x'));
  // Deep input values and values a template builds are bounded too.
  json deep = json::array();
  for (int i = 0; i < 400; ++i) deep = json::array({deep});
  EXPECT_NE(error_of("{{ v }}", {{"v", deep}}).find("nested deeper than"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(v=[]) %}{% for i in range(5000) %}{% set ns.v = [ns.v] %}{% endfor %}"
                     "{{ ns.v | length }}")
                .find("nested deeper than"),
            std::string::npos);
}

TEST(Jinja, NamespacesAndMacrosThatHoldThemselvesDoNotLeak) {
  // Cycles (a namespace holding itself, a macro held by the frame it closes over) are broken after the
  // render; the ASan build checks that nothing leaks.
  EXPECT_EQ(render_text("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}"), "True");
  EXPECT_EQ(render_text("{% macro f(n) %}{{ n }}{% endmacro %}{% set ns = namespace(f=f) %}{{ ns.f(1) }}"), "1");
}

}  // namespace
}  // namespace sy::text::jinja
