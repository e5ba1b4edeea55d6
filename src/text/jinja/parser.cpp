// Jinja parser (see parser.h): recursive descent over the lexer's tokens, mirroring jinja2/parser.py's grammar.
#include "text/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "base/check.h"
#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"

namespace sy::text::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : t_(std::move(tokens)), name_(name) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().kind != TokenKind::eof) fail(fmt::format("unexpected '{}'", cur().text));
    return body;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxSyntaxDepth) p.fail(fmt::format("template nested deeper than {} levels", kMaxSyntaxDepth));
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  Token next() { return i_ + 1 < t_.size() ? t_[i_++] : t_[i_]; }

  [[noreturn]] void fail(const std::string& msg) const { fail_at(cur().line, msg); }
  [[noreturn]] void fail_at(int line, const std::string& msg) const { SY_FAIL("{}, line {}: {}", name_, line, msg); }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::eof:
        return "end of template";
      case TokenKind::var_end:
        return "end of print statement";
      case TokenKind::block_end:
        return "end of statement block";
      case TokenKind::data:
        return "template data";
      default:
        return "'" + t.text + "'";
    }
  }

  bool is_op(std::string_view op) const { return cur().kind == TokenKind::op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::name) fail(fmt::format("expected a name, got {}", describe(cur())));
    return next().text;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::block_end)
      fail(fmt::format("expected end of statement block, got {}", describe(cur())));
    next();
  }

  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  // Checks the depth of a finished node so that evaluating or destroying it stays within the stack.
  ExprPtr seal(ExprPtr e) {
    int depth = 0;
    for (const auto& a : e->args)
      if (a) depth = std::max(depth, a->depth);
    for (const auto& [k, a] : e->kwargs) depth = std::max(depth, a->depth);
    e->depth = depth + 1;
    if (e->depth > kMaxSyntaxDepth) {
      fail_at(e->line, fmt::format("expression nested deeper than {} levels", kMaxSyntaxDepth));
    }
    return e;
  }

  // ---- statements ----

  // Parses until a block tag whose name is in `ends` (left unconsumed) or the end of the template.
  Body parse_body(std::initializer_list<std::string_view> ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::eof) {
        if (ends.size() != 0) {
          std::string want;
          for (auto e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
          fail(fmt::format("unexpected end of template, expected {}", want));
        }
        return body;
      }
      if (t.kind == TokenKind::data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::text;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TokenKind::var_begin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::output;
        s->line = t.line;
        next();
        s->expr = parse_tuple(true, false);
        if (cur().kind != TokenKind::var_end)
          fail(fmt::format("expected end of print statement, got {}", describe(cur())));
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::block_begin) {
        const Token& tag = peek();
        if (tag.kind != TokenKind::name) fail_at(tag.line, "expected a statement name after '{%'");
        if (std::find(ends.begin(), ends.end(), tag.text) != ends.end()) {
          next();  // leaves the tag name current
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  std::unique_ptr<Stmt> stmt(StmtKind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  // Consumes `{% end... %}` after parse_body stopped at it.
  void end_tag(std::string_view name) {
    if (!skip_name(name)) fail(fmt::format("expected '{}'", name));
    expect_block_end();
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token tag = next();
    const std::string& n = tag.text;
    if (n == "if") return parse_if(tag.line);
    if (n == "for") return parse_for(tag.line);
    if (n == "set") return parse_set(tag.line);
    if (n == "macro") return parse_macro(tag.line);
    if (n == "call") return parse_call_block(tag.line);
    if (n == "filter") return parse_filter_block(tag.line);
    if (n == "with") return parse_with(tag.line);
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail_at(tag.line, fmt::format("'{}' outside of a loop", n));
      expect_block_end();
      return stmt(n == "break" ? StmtKind::break_ : StmtKind::continue_, tag.line);
    }
    if (n == "generation") {
      auto s = stmt(StmtKind::generation, tag.line);
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
      return s;
    }
    static constexpr std::string_view kEnds[] = {"endif",   "endfor",    "endset",  "endmacro",
                                                 "endcall", "endfilter", "endwith", "endgeneration",
                                                 "elif",    "else",      "endraw"};
    if (std::find(std::begin(kEnds), std::end(kEnds), n) != std::end(kEnds)) {
      fail_at(tag.line, fmt::format("unexpected '{}'", n));
    }
    fail_at(tag.line, fmt::format("unknown tag '{}'", n));
  }

  std::unique_ptr<Stmt> parse_if(int line) {
    auto s = stmt(StmtKind::if_, line);
    while (true) {
      s->conds.push_back(parse_tuple(true, false));
      expect_block_end();
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = parse_body({"endif"});
      }
      end_tag("endif");
      return s;
    }
  }

  Target parse_target(bool with_namespace) {
    auto one = [&]() {
      Target t;
      if (skip_op("(")) {
        t = parse_target(with_namespace);
        expect_op(")");
        return t;
      }
      t.name = expect_name();
      if (with_namespace && is_op(".")) {
        next();
        t.attr = expect_name();
      }
      return t;
    };
    Target first = one();
    if (!is_op(",")) return first;
    Target tuple;
    tuple.is_tuple = true;
    tuple.items.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind != TokenKind::name && !is_op("(")) break;
      tuple.items.push_back(one());
    }
    return tuple;
  }

  std::unique_ptr<Stmt> parse_for(int line) {
    auto s = stmt(StmtKind::for_, line);
    s->target = parse_target(false);
    if (!skip_name("in")) fail(fmt::format("expected 'in', got {}", describe(cur())));
    s->expr = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    end_tag("endfor");
    return s;
  }

  std::unique_ptr<Stmt> parse_set(int line) {
    Target target = parse_target(true);
    if (skip_op("=")) {
      auto s = stmt(StmtKind::set, line);
      s->target = std::move(target);
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    auto s = stmt(StmtKind::set_block, line);
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endset"});
    loop_depth_ = saved;
    end_tag("endset");
    return s;
  }

  void parse_params(std::vector<Param>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
      } else if (!params.empty() && params.back().default_value) {
        fail("parameter without a default follows a parameter with a default");
      }
      params.push_back(std::move(p));
    }
    next();
  }

  std::unique_ptr<Stmt> parse_macro(int line) {
    auto s = stmt(StmtKind::macro, line);
    s->text = expect_name();
    parse_params(s->params);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    end_tag("endmacro");
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block(int line) {
    auto s = stmt(StmtKind::call_block, line);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::call) fail_at(line, "expected a call after 'call'");
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endcall"});
    loop_depth_ = saved;
    end_tag("endcall");
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block(int line) {
    auto s = stmt(StmtKind::filter_block, line);
    s->expr = parse_filter_chain(nullptr, /*first_without_pipe=*/true);
    expect_block_end();
    s->body = parse_body({"endfilter"});
    end_tag("endfilter");
    return s;
  }

  std::unique_ptr<Stmt> parse_with(int line) {
    auto s = stmt(StmtKind::with, line);
    while (cur().kind != TokenKind::block_end) {
      if (!s->assignments.empty()) expect_op(",");
      Target t = parse_target(false);
      expect_op("=");
      s->assignments.emplace_back(std::move(t), parse_expression(true));
    }
    expect_block_end();
    s->body = parse_body({"endwith"});
    end_tag("endwith");
    return s;
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.kind == TokenKind::var_end || t.kind == TokenKind::block_end || t.kind == TokenKind::eof) return true;
    if (t.kind == TokenKind::op && t.text == ")") return true;
    return t.kind == TokenKind::name && std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens,
                      std::initializer_list<std::string_view> extra_end = {}) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(fmt::format("expected an expression, got {}", describe(cur())));
    }
    auto e = node(ExprKind::tuple, line);
    e->args = std::move(items);
    return seal(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      int line = next().line;
      auto c = node(ExprKind::cond, line);
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_expression(true);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(otherwise));
      e = seal(std::move(c));
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line) {
    auto e = node(ExprKind::binary, line);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return seal(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = next().line;
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = next().line;
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      int line = next().line;
      auto e = node(ExprKind::unary, line);
      e->name = "not";
      e->args.push_back(parse_not());
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                          cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().kind == TokenKind::name && peek().text == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::compare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(first);
  }

  template <typename F>
  ExprPtr parse_binary_level(std::initializer_list<std::string_view> ops, F next_level) {
    ExprPtr e = next_level();
    while (cur().kind == TokenKind::op && std::find(ops.begin(), ops.end(), cur().text) != ops.end()) {
      Token op = next();
      e = binary(op.text, std::move(e), next_level(), op.line);
    }
    return e;
  }

  ExprPtr parse_math1() {
    return parse_binary_level({"+", "-"}, [&] { return parse_concat(); });
  }
  ExprPtr parse_concat() {
    return parse_binary_level({"~"}, [&] { return parse_math2(); });
  }
  ExprPtr parse_math2() {
    return parse_binary_level({"*", "/", "//", "%"}, [&] { return parse_pow(); });
  }
  ExprPtr parse_pow() {
    return parse_binary_level({"**"}, [&] { return parse_unary(true); });
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      Token op = next();
      e = node(ExprKind::unary, op.line);
      e->name = op.text;
      e->args.push_back(parse_unary(false));
      e = seal(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, int line) {
    auto e = node(ExprKind::literal, line);
    e->value = std::move(v);
    return seal(std::move(e));
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token t = cur();
    switch (t.kind) {
      case TokenKind::name: {
        next();
        if (t.text == "true" || t.text == "True") return literal(Value(true), t.line);
        if (t.text == "false" || t.text == "False") return literal(Value(false), t.line);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
        auto e = node(ExprKind::name, t.line);
        e->name = t.text;
        return seal(std::move(e));
      }
      case TokenKind::string: {
        std::string s;
        while (cur().kind == TokenKind::string) s += next().text;
        return literal(Value(std::move(s)), t.line);
      }
      case TokenKind::integer:
        next();
        return literal(Value(t.int_value), t.line);
      case TokenKind::floating:
        next();
        return literal(Value(t.float_value), t.line);
      case TokenKind::op:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto e = node(ExprKind::list, t.line);
          while (!is_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("]")) break;
            e->args.push_back(parse_expression(true));
          }
          next();
          return seal(std::move(e));
        }
        if (t.text == "{") {
          next();
          auto e = node(ExprKind::dict, t.line);
          while (!is_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (is_op("}")) break;
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
          }
          next();
          return seal(std::move(e));
        }
        break;
      default:
        break;
    }
    fail(fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    Token t = next();
    if (t.text == ".") {
      if (cur().kind == TokenKind::name) {
        auto e = node(ExprKind::attr, t.line);
        e->name = next().text;
        e->args.push_back(std::move(obj));
        return seal(std::move(e));
      }
      if (cur().kind == TokenKind::integer) {
        auto e = node(ExprKind::item, t.line);
        e->args.push_back(std::move(obj));
        e->args.push_back(literal(Value(next().int_value), t.line));
        return seal(std::move(e));
      }
      fail(fmt::format("expected a name or number after '.', got {}", describe(cur())));
    }
    // '[' subscript: an index, a slice, or a tuple of indices
    std::vector<ExprPtr> parts;
    bool is_slice = false;
    ExprPtr bounds[3];
    auto parse_slice_part = [&]() {
      int k = 0;
      if (!is_op(":")) bounds[k] = parse_expression(true);
      if (!is_op(":")) return false;
      is_slice = true;
      next();
      k = 1;
      if (!is_op("]") && !is_op(":")) bounds[k] = parse_expression(true);
      if (skip_op(":") && !is_op("]")) bounds[2] = parse_expression(true);
      return true;
    };
    if (!parse_slice_part()) {
      parts.push_back(std::move(bounds[0]));
      while (skip_op(",")) {
        if (is_op("]")) break;
        parts.push_back(parse_expression(true));
      }
    }
    expect_op("]");
    if (is_slice) {
      auto e = node(ExprKind::slice, t.line);
      e->args.push_back(std::move(obj));
      for (auto& b : bounds) e->args.push_back(std::move(b));
      return seal(std::move(e));
    }
    auto e = node(ExprKind::item, t.line);
    e->args.push_back(std::move(obj));
    if (parts.size() == 1) {
      e->args.push_back(std::move(parts[0]));
    } else {
      auto tup = node(ExprKind::tuple, t.line);
      tup->args = std::move(parts);
      e->args.push_back(seal(std::move(tup)));
    }
    return seal(std::move(e));
  }

  // Call arguments from the current '(' to its ')': positional appended to e.args, keyword to e.kwargs.
  void call_args(Expr& e) {
    expect_op("(");
    bool any = false;
    while (!is_op(")")) {
      if (any) expect_op(",");
      if (is_op(")")) break;
      any = true;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().kind == TokenKind::name && peek().kind == TokenKind::op && peek().text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("positional argument follows keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::call, cur().line);
    e->args.push_back(std::move(callee));
    call_args(*e);
    return seal(std::move(e));
  }

  // `| name(args) | name ...`; with first_without_pipe the first filter has no leading '|' (filter blocks).
  ExprPtr parse_filter_chain(ExprPtr subject, bool first_without_pipe = false) {
    bool first = true;
    while (is_op("|") || (first && first_without_pipe)) {
      if (!(first && first_without_pipe)) next();
      first = false;
      auto e = node(ExprKind::filter, cur().line);
      e->name = expect_name();
      while (skip_op(".")) e->name.append(".").append(expect_name());
      if (!has_filter(e->name)) fail_at(e->line, fmt::format("No filter named '{}'.", e->name));
      e->args.push_back(std::move(subject));
      if (is_op("(")) call_args(*e);
      subject = seal(std::move(e));
    }
    return subject;
  }

  ExprPtr parse_test(ExprPtr subject) {
    int line = next().line;  // 'is'
    bool negated = skip_name("not");
    auto e = node(ExprKind::test, line);
    e->name = expect_name();
    while (skip_op(".")) e->name.append(".").append(expect_name());
    if (!has_test(e->name)) fail_at(line, fmt::format("No test named '{}'.", e->name));
    e->args.push_back(std::move(subject));
    const Token& t = cur();
    if (is_op("(")) {
      call_args(*e);
    } else if ((t.kind == TokenKind::name || t.kind == TokenKind::string || t.kind == TokenKind::integer ||
                t.kind == TokenKind::floating || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    ExprPtr test = seal(std::move(e));
    if (!negated) return test;
    auto n = node(ExprKind::unary, line);
    n->name = "not";
    n->args.push_back(std::move(test));
    return seal(std::move(n));
  }

  std::vector<Token> t_;
  const std::string& name_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& source, const std::string& name) {
  return Parser(lex(source, name), name).parse_all();
}

}  // namespace sy::text::jinja
