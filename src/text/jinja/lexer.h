// Jinja lexer: template text to tokens, with Jinja2's whitespace control (trim_blocks, lstrip_blocks, -/+),
// comments and raw blocks resolved here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sy::text::jinja {

enum class TokenKind { data, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  TokenKind kind;
  std::string text;  // data, name, operator, or the decoded string literal
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws sy::Error "<name>, line N: ..." on an unterminated tag, comment, string or raw block.
std::vector<Token> lex(const std::string& source, const std::string& name, const LexOptions& options = {});

}  // namespace sy::text::jinja
