// Template rendering (see interpreter.h): a tree walk over statements and expressions with Jinja2's scoping.
#include "text/jinja/interpreter.h"

#include "base/check.h"
#include "text/jinja/builtins.h"

namespace sy::text::jinja {
namespace {

// Loop iterations a render may run in all; templates have no while loops, so this only stops runaway
// nested loops over large ranges.
constexpr int64_t kMaxIterations = 10'000'000;

struct Frame {
  explicit Frame(std::shared_ptr<const Frame> p) : parent(std::move(p)) {}
  std::shared_ptr<const Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find_local(std::string_view n) const {
    for (const auto& [k, v] : vars)
      if (k == n) return &v;
    return nullptr;
  }
  void set(const std::string& n, Value v) {
    for (auto& [k, old] : vars) {
      if (k == n) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(n, std::move(v));
  }
};
using FramePtr = std::shared_ptr<Frame>;

class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  Value get_attr(std::string_view name) const override {
    for (const auto& [k, v] : attrs)
      if (k == name) return v;
    return Value::undefined(fmt::format("'jinja2.utils.Namespace object' has no attribute {}", string_repr(name)));
  }
  bool set_attr(const std::string& name, Value value) override {
    for (auto& [k, v] : attrs) {
      if (k == name) {
        v = std::move(value);
        return true;
      }
    }
    attrs.emplace_back(name, std::move(value));
    return true;
  }
  std::string repr() const override {
    std::string out = "<Namespace {";
    for (size_t i = 0; i < attrs.size(); ++i) {
      if (i) out += ", ";
      out += string_repr(attrs[i].first) + ": " + attrs[i].second.repr();
    }
    return out + "}>";
  }
  std::vector<std::pair<std::string, Value>> attrs;
};

class LoopObject : public Object {
 public:
  explicit LoopObject(std::shared_ptr<const std::vector<Value>> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "LoopContext"; }
  Value get_attr(std::string_view name) const override {
    auto n = static_cast<int64_t>(items_->size());
    if (name == "index") return Value(index0 + 1);
    if (name == "index0") return Value(index0);
    if (name == "revindex") return Value(n - index0);
    if (name == "revindex0") return Value(n - index0 - 1);
    if (name == "first") return Value(index0 == 0);
    if (name == "last") return Value(index0 == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(1);
    if (name == "depth0") return Value(0);
    if (name == "previtem") {
      if (index0 > 0) return (*items_)[index0 - 1];
      return Value::undefined("there is no previous item");
    }
    if (name == "nextitem") {
      if (index0 + 1 < n) return (*items_)[index0 + 1];
      return Value::undefined("there is no next item");
    }
    if (name == "cycle") {
      int64_t i = index0;
      return Value::callable("cycle", [i](CallArgs& a) -> Value {
        SY_CHECK(!a.pos.empty(), "no items for cycling given");
        return a.pos[static_cast<size_t>(i % static_cast<int64_t>(a.pos.size()))];
      });
    }
    return Value::undefined(fmt::format("'jinja2.runtime.LoopContext object' has no attribute {}", string_repr(name)));
  }
  std::string repr() const override { return fmt::format("<LoopContext {}/{}>", index0 + 1, items_->size()); }
  int64_t index0 = 0;

 private:
  std::shared_ptr<const std::vector<Value>> items_;
};

enum class Flow { normal, break_, continue_ };

bool expr_uses(const Expr* e, std::string_view n);
bool body_uses(const Body& b, std::string_view n);

bool expr_uses(const Expr* e, std::string_view n) {
  if (!e) return false;
  if (e->kind == ExprKind::name && e->name == n) return true;
  for (const auto& a : e->args)
    if (expr_uses(a.get(), n)) return true;
  for (const auto& [k, a] : e->kwargs)
    if (expr_uses(a.get(), n)) return true;
  return false;
}

bool body_uses(const Body& b, std::string_view n) {
  for (const auto& s : b) {
    if (expr_uses(s->expr.get(), n) || expr_uses(s->cond.get(), n)) return true;
    for (const auto& c : s->conds)
      if (expr_uses(c.get(), n)) return true;
    for (const auto& body : s->bodies)
      if (body_uses(body, n)) return true;
    if (body_uses(s->body, n) || body_uses(s->else_body, n)) return true;
    for (const auto& p : s->params)
      if (expr_uses(p.default_value.get(), n)) return true;
    for (const auto& [t, e] : s->assignments)
      if (expr_uses(e.get(), n)) return true;
  }
  return false;
}

class Renderer {
 public:
  explicit Renderer(const std::string& name) : name_(name) {}
  // Macros hold their defining frame and frames hold macros: clearing the frames breaks those cycles.
  ~Renderer() {
    for (const auto& f : macro_frames_) f->vars.clear();
  }

  std::string run(const Body& body, const FramePtr& root) {
    std::string out;
    try {
      exec(body, root, out);
    } catch (const TemplateRaised& r) {
      SY_FAIL("{}, line {}: {}", name_, line_, r.message);
    } catch (const std::exception& e) {
      SY_FAIL("{}, line {}: {}", name_, line_, e.what());
    }
    return out;
  }

 private:
  // One level of the tree walk: a statement or an expression being evaluated, through every macro call
  // in progress. The parser bounds one template's nesting and call_depth_ the macro calls, but a recursive
  // macro multiplies the two; this bounds their product, so that the walk stays well within the stack.
  struct Nest {
    explicit Nest(Renderer& r) : r(r) {
      SY_CHECK(r.nesting_ < kMaxNesting,
               "template evaluation nested deeper than {} levels (statements and expressions, through {} macro "
               "call(s) in progress); a recursive macro should recurse less deeply",
               kMaxNesting, r.call_depth_);
      ++r.nesting_;
    }
    ~Nest() { --r.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    Renderer& r;
  };

  Flow exec(const Body& body, const FramePtr& f, std::string& out) {
    for (const auto& s : body) {
      Flow fl = exec_stmt(*s, f, out);
      if (fl != Flow::normal) return fl;
    }
    return Flow::normal;
  }

  Flow exec_stmt(const Stmt& s, const FramePtr& f, std::string& out) {
    Nest nest(*this);
    line_ = s.line;
    switch (s.kind) {
      case StmtKind::text:
        out += s.text;
        return Flow::normal;
      case StmtKind::output:
        out += eval(*s.expr, f).str();
        return Flow::normal;
      case StmtKind::if_:
        for (size_t i = 0; i < s.conds.size(); ++i) {
          if (eval(*s.conds[i], f).truthy()) return exec(s.bodies[i], f, out);
        }
        return exec(s.else_body, f, out);
      case StmtKind::for_:
        exec_for(s, f, out);
        return Flow::normal;
      case StmtKind::set:
        assign(s.target, eval(*s.expr, f), f);
        return Flow::normal;
      case StmtKind::set_block: {
        Value v(render_child(s.body, f));
        if (s.expr) v = eval_filter(*s.expr, f, &v);
        assign(s.target, std::move(v), f);
        return Flow::normal;
      }
      case StmtKind::macro:
        f->set(s.text, make_macro(f, s.text, s.params, s.body));
        return Flow::normal;
      case StmtKind::call_block: {
        Value caller = make_macro(f, "caller", s.params, s.body);
        const Expr& call = *s.expr;
        out += call_expr(call, f, &caller).str();
        return Flow::normal;
      }
      case StmtKind::filter_block: {
        Value v(render_child(s.body, f));
        out += eval_filter(*s.expr, f, &v).str();
        return Flow::normal;
      }
      case StmtKind::break_:
        return Flow::break_;
      case StmtKind::continue_:
        return Flow::continue_;
      case StmtKind::generation:
        out += render_child(s.body, f);
        return Flow::normal;
      case StmtKind::with: {
        auto wf = std::make_shared<Frame>(f);
        for (const auto& [t, e] : s.assignments) assign(t, eval(*e, f), wf);
        return exec(s.body, wf, out);
      }
    }
    return Flow::normal;
  }

  std::string render_child(const Body& body, const FramePtr& f) {
    auto cf = std::make_shared<Frame>(f);
    std::string out;
    exec(body, cf, out);
    return out;
  }

  void exec_for(const Stmt& s, const FramePtr& f, std::string& out) {
    Value seq = eval(*s.expr, f);
    std::vector<Value> items = iterate(seq);
    if (s.cond) {
      std::vector<Value> kept;
      for (auto& item : items) {
        auto tf = std::make_shared<Frame>(f);
        assign(s.target, item, tf);
        if (eval(*s.cond, tf).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      auto ef = std::make_shared<Frame>(f);
      exec(s.else_body, ef, out);
      return;
    }
    auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
    auto loop = std::make_shared<LoopObject>(shared);
    Value loop_value{std::shared_ptr<Object>(loop)};
    // As Jinja2 compiles it, the else body runs unless some iteration reached the end of the body (without
    // break or continue).
    bool completed = false;
    for (size_t i = 0; i < shared->size(); ++i) {
      SY_CHECK(++iterations_ <= kMaxIterations, "more than {} loop iterations in one render", kMaxIterations);
      auto lf = std::make_shared<Frame>(f);
      loop->index0 = static_cast<int64_t>(i);
      lf->vars.reserve(3);
      lf->set("loop", loop_value);
      assign(s.target, (*shared)[i], lf);
      line_ = s.line;
      Flow fl = exec(s.body, lf, out);
      if (fl == Flow::break_) break;
      if (fl == Flow::normal) completed = true;
    }
    if (!completed && !s.else_body.empty()) {
      auto ef = std::make_shared<Frame>(f);
      exec(s.else_body, ef, out);
    }
  }

  void assign(const Target& t, Value v, const FramePtr& f) {
    if (t.is_tuple) {
      std::vector<Value> items = iterate_strict(v);
      SY_CHECK(items.size() == t.items.size(), "{} values to unpack (expected {}, got {})",
               items.size() > t.items.size() ? "too many" : "not enough", t.items.size(), items.size());
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], std::move(items[i]), f);
      return;
    }
    if (!t.attr.empty()) {
      Value ns = lookup(t.name, f);
      check_defined(ns);
      SY_CHECK(ns.is_object() && ns.object().set_attr(t.attr, std::move(v)),
               "cannot assign attribute on non-namespace object");
      return;
    }
    f->set(t.name, std::move(v));
  }

  static std::vector<Value> iterate_strict(const Value& v) {
    SY_CHECK(!v.is_undefined(), "{}", v.undefined_hint());
    return iterate(v);
  }

  Value lookup(const std::string& n, const FramePtr& f) const {
    for (const Frame* fr = f.get(); fr; fr = fr->parent.get()) {
      if (const Value* v = fr->find_local(n)) return *v;
    }
    return Value::undefined(fmt::format("'{}' is undefined", n));
  }

  Value make_macro(const FramePtr& f, const std::string& name, const std::vector<Param>& params, const Body& body) {
    bool varargs = body_uses(body, "varargs");
    bool kwargs = body_uses(body, "kwargs");
    bool caller = body_uses(body, "caller");
    macro_frames_.push_back(f);
    auto fn = [this, f, name, &params, &body, varargs, kwargs, caller](CallArgs& a) -> Value {
      SY_CHECK(call_depth_ < kMaxCallDepth, "macro calls nested deeper than {} (recursion?)", kMaxCallDepth);
      ++call_depth_;
      struct Leave {
        int& d;
        ~Leave() { --d; }
      } leave{call_depth_};
      auto mf = std::make_shared<Frame>(f);
      SY_CHECK(varargs || a.pos.size() <= params.size(), "macro '{}' takes not more than {} argument(s)", name,
               params.size());
      std::vector<bool> bound(params.size(), false);
      std::vector<std::pair<Value, Value>> extra_kw;
      Value caller_value;
      for (size_t i = 0; i < params.size() && i < a.pos.size(); ++i) {
        mf->set(params[i].name, a.pos[i]);
        bound[i] = true;
      }
      for (auto& [k, v] : a.kw) {
        size_t i = 0;
        while (i < params.size() && params[i].name != k) ++i;
        if (i < params.size()) {
          SY_CHECK(!bound[i], "macro '{}' got multiple values for argument '{}'", name, k);
          mf->set(k, v);
          bound[i] = true;
        } else if (k == "caller" && caller) {
          caller_value = v;
        } else {
          SY_CHECK(kwargs, "macro '{}' takes no keyword argument '{}'", name, k);
          extra_kw.emplace_back(Value(k), v);
        }
      }
      for (size_t i = 0; i < params.size(); ++i) {
        if (bound[i]) continue;
        mf->set(params[i].name, params[i].default_value
                                    ? eval(*params[i].default_value, mf)
                                    : Value::undefined(fmt::format("'{}' is undefined", params[i].name)));
      }
      if (varargs) {
        std::vector<Value> rest;
        for (size_t i = params.size(); i < a.pos.size(); ++i) rest.push_back(a.pos[i]);
        mf->set("varargs", Value::list(std::move(rest), true));
      }
      if (kwargs) mf->set("kwargs", Value::dict(std::move(extra_kw)));
      if (caller) mf->set("caller", caller_value);
      std::string out;
      int saved_line = line_;
      exec(body, mf, out);
      line_ = saved_line;
      return Value(std::move(out));
    };
    auto c = std::make_shared<Callable>(Callable{name, std::move(fn), true});
    return Value(std::shared_ptr<const Callable>(std::move(c)));
  }

  CallArgs eval_args(const Expr& e, size_t first, const FramePtr& f) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], f));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, f));
    return a;
  }

  Value call_expr(const Expr& e, const FramePtr& f, const Value* caller) {
    Value callee = eval(*e.args[0], f);
    check_defined(callee);
    SY_CHECK(callee.is_callable(), "'{}' object is not callable", callee.type_name());
    CallArgs a = eval_args(e, 1, f);
    if (caller) a.kw.emplace_back("caller", *caller);
    line_ = e.line;
    return callee.callable_data().fn(a);
  }

  // A filter chain; `subject` replaces the innermost (absent) subject of a filter block or block set.
  Value eval_filter(const Expr& e, const FramePtr& f, const Value* subject) {
    Value v = e.args[0] ? (e.args[0]->kind == ExprKind::filter && subject ? eval_filter(*e.args[0], f, subject)
                                                                          : eval(*e.args[0], f))
                        : *subject;
    CallArgs a = eval_args(e, 1, f);
    line_ = e.line;
    return apply_filter(e.name, v, a);
  }

  Value eval(const Expr& e, const FramePtr& f) {
    Nest nest(*this);
    line_ = e.line;
    switch (e.kind) {
      case ExprKind::literal:
        return e.value;
      case ExprKind::name:
        return lookup(e.name, f);
      case ExprKind::list:
      case ExprKind::tuple: {
        std::vector<Value> items;
        items.reserve(e.args.size());
        for (const auto& a : e.args) items.push_back(eval(*a, f));
        return Value::list(std::move(items), e.kind == ExprKind::tuple);
      }
      case ExprKind::dict: {
        std::vector<std::pair<Value, Value>> items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i], f);
          SY_CHECK(!k.is_list() || k.is_tuple(), "unhashable type: '{}'", k.type_name());
          SY_CHECK(!k.is_dict(), "unhashable type: 'dict'");
          items.emplace_back(std::move(k), eval(*e.args[i + 1], f));
        }
        return Value::dict(std::move(items));
      }
      case ExprKind::attr: {
        Value obj = eval(*e.args[0], f);
        return get_attr(obj, e.name);
      }
      case ExprKind::item: {
        Value obj = eval(*e.args[0], f);
        return get_item(obj, eval(*e.args[1], f));
      }
      case ExprKind::slice: {
        Value obj = eval(*e.args[0], f);
        auto bound = [&](size_t i) { return e.args[i] ? eval(*e.args[i], f) : Value::none(); };
        Value start = bound(1), stop = bound(2), step = bound(3);
        return get_slice(obj, start, stop, step);
      }
      case ExprKind::call:
        return call_expr(e, f, nullptr);
      case ExprKind::filter:
        return eval_filter(e, f, nullptr);
      case ExprKind::test: {
        Value v = eval(*e.args[0], f);
        CallArgs a = eval_args(e, 1, f);
        line_ = e.line;
        return Value(apply_test(e.name, v, a));
      }
      case ExprKind::unary: {
        Value v = eval(*e.args[0], f);
        if (e.name == "not") return Value(!v.truthy());
        check_defined(v);
        SY_CHECK(v.is_number(), "bad operand type for unary {}: '{}'", e.name, v.type_name());
        if (e.name == "+") return v.is_bool() ? Value(v.to_int()) : v;
        if (v.is_float()) return Value(-v.as_float());
        SY_CHECK(v.to_int() != INT64_MIN, "integer overflow");
        return Value(-v.to_int());
      }
      case ExprKind::binary: {
        Value l = eval(*e.args[0], f);
        if (e.name == "and") return l.truthy() ? eval(*e.args[1], f) : l;
        if (e.name == "or") return l.truthy() ? l : eval(*e.args[1], f);
        Value r = eval(*e.args[1], f);
        line_ = e.line;
        return binary_op(e.name, l, r);
      }
      case ExprKind::compare: {
        Value l = eval(*e.args[0], f);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = eval(*e.args[i + 1], f);
          line_ = e.line;
          if (!compare(e.ops[i], l, r)) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case ExprKind::cond:
        if (eval(*e.args[1], f).truthy()) return eval(*e.args[0], f);
        return e.args[2] ? eval(*e.args[2], f) : Value::undefined("the conditional expression has no else");
    }
    return Value();
  }

  static bool compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return l.equals(r);
    if (op == "!=") return !l.equals(r);
    if (op == "in") return contains(r, l);
    if (op == "not in") return !contains(r, l);
    check_defined(l);
    check_defined(r);
    int c = compare_values(l, r);
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  const std::string& name_;
  int line_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;
  int64_t iterations_ = 0;
  std::vector<FramePtr> macro_frames_;
};

// namespace(): a Namespace recorded in `made`, whose attributes render() clears at the end, since a
// namespace may hold itself.
Value make_namespace(CallArgs& a, std::vector<std::shared_ptr<Namespace>>& made) {
  auto ns = std::make_shared<Namespace>();
  made.push_back(ns);
  SY_CHECK(a.pos.size() <= 1, "namespace() takes at most one positional argument");
  if (!a.pos.empty()) {
    SY_CHECK(a.pos[0].is_dict(), "namespace() takes a dict, got {}", a.pos[0].type_name());
    for (const auto& [k, v] : a.pos[0].dict_data().items) ns->set_attr(k.str(), v);
  }
  for (auto& [k, v] : a.kw) ns->set_attr(k, v);
  return Value(std::shared_ptr<Object>(std::move(ns)));
}

}  // namespace

std::string render(const Body& body, const std::string& name,
                   const std::vector<std::pair<std::string, Value>>& context) {
  auto globals = std::make_shared<Frame>(nullptr);
  for (auto& [k, v] : global_functions()) globals->set(k, std::move(v));
  std::vector<std::shared_ptr<Namespace>> namespaces;
  struct ClearNamespaces {
    std::vector<std::shared_ptr<Namespace>>& made;
    ~ClearNamespaces() {
      for (const auto& ns : made) ns->attrs.clear();
    }
  } clear{namespaces};
  globals->set("namespace",
               Value::callable("namespace", [&namespaces](CallArgs& a) { return make_namespace(a, namespaces); }));
  auto root = std::make_shared<Frame>(globals);
  for (const auto& [k, v] : context) root->set(k, v);
  return Renderer(name).run(body, root);
}

}  // namespace sy::text::jinja
