// Jinja parser: tokens to a syntax tree, with Jinja2's operator precedence and statement forms.
#pragma once

#include <string>

#include "text/jinja/ast.h"

namespace sy::text::jinja {

// The deepest nesting of expressions and statements a template may have; deeper templates are refused
// with a syntax error instead of overflowing the stack while parsing or rendering.
inline constexpr int kMaxSyntaxDepth = 128;

// Parses a whole template. Throws sy::Error "<name>, line N: ..." on a syntax error.
Body parse_template(const std::string& source, const std::string& name);

}  // namespace sy::text::jinja
