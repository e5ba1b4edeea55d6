// The syntax tree of a parsed template: expressions and statements, each with its template line.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace sy::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  literal,  // value
  name,     // name
  list,     // args: items
  tuple,    // args: items
  dict,     // args: key, value, key, value, ...
  attr,     // args[0].name
  item,     // args[0][args[1]]
  slice,    // args[0][args[1]:args[2]:args[3]], absent bounds are null
  call,     // args[0](args[1..], kwargs)
  filter,   // args[0] | name(args[1..], kwargs); args[0] is null inside a filter block
  test,     // args[0] is name(args[1..], kwargs)
  unary,    // name in {"not", "-", "+"}: args[0]
  binary,   // name in {"+", "-", "*", "/", "//", "%", "**", "~", "and", "or", "in", "not in"}
  compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
  cond,     // args[0] if args[1] else args[2] (args[2] null: undefined)
};

struct Expr {
  ExprKind kind = ExprKind::literal;
  int line = 0;
  int depth = 1;  // of the subtree, bounded by kMaxSyntaxDepth
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

// Assignment targets: `x`, `a, b`, `(a, (b, c))` or `ns.attr`.
struct Target {
  std::string name;           // a single name, or the namespace of ns.attr
  std::string attr;           // non-empty for ns.attr
  std::vector<Target> items;  // non-empty for a tuple target
  bool is_tuple = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind {
  text,          // text
  output,        // {{ expr }}
  if_,           // conds[i] -> bodies[i]; else_body
  for_,          // for target in expr [if cond]: body; else_body
  set,           // set target = expr
  set_block,     // set target [| filter]: body
  macro,         // macro name(params): body
  call_block,    // call(params) expr: body
  filter_block,  // filter expr: body
  break_,
  continue_,
  generation,  // generation: body
  with,        // with targets = values: body
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind = StmtKind::text;
  int line = 0;
  std::string text;
  ExprPtr expr;  // output / for iterable / set value / call / filter chain
  ExprPtr cond;  // for's filter
  Target target;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<Param> params;                            // macro / call block parameters
  std::vector<std::pair<Target, ExprPtr>> assignments;  // with
};

}  // namespace sy::text::jinja
