#pragma once
// Template source to tokens, with the whitespace rules Hugging Face renders
// chat templates under: trim_blocks (the newline after a block or comment tag
// goes), lstrip_blocks (spaces and tabs before a block or comment tag that
// starts its line go), "-" on a tag's inside strips all whitespace on that
// side, "+" keeps it, and one trailing newline of the source is dropped.

#include <string>
#include <string_view>
#include <vector>

namespace actorlm::jinja {

struct Token {
  enum class Kind {
    text,         // template data between tags (value: the data)
    print_open,   // {{
    print_close,  // }}
    block_open,   // {%
    block_close,  // %}
    name,         // identifier or keyword
    string,       // string literal (value: unescaped)
    integer,
    floating,
    op,  // punctuation: + - * / // % ** ~ ( ) [ ] { } , . : | = == != < > <= >=
    end,
  };
  Kind kind;
  std::string value;
  int line;
};

// Throws Error::Kind::syntax (unclosed tags, comments, strings; unknown
// characters).
std::vector<Token> tokenize(std::string_view source);

}  // namespace actorlm::jinja
