// Renders a parsed template: statements, expressions, scopes (Jinja2's per-iteration loop scopes, macro
// frames) and macros, with bounded call depth and nesting.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text/jinja/ast.h"

namespace sy::text::jinja {

// The deepest chain of macro calls a render may make; deeper recursion is an error.
inline constexpr int kMaxCallDepth = 100;
// The deepest a render may nest statements and expressions in all, counted through the macro calls in
// progress; deeper is an error.
inline constexpr int kMaxNesting = 1000;

// Renders `body` with `context` (name -> value, later names replacing earlier ones) over the global
// functions. Throws sy::Error "<name>, line N: <message>"; a raise_exception message is passed as is after
// the prefix.
std::string render(const Body& body, const std::string& name,
                   const std::vector<std::pair<std::string, Value>>& context);

}  // namespace sy::text::jinja
