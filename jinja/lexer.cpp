#include "jinja/lexer.hpp"

#include <cctype>
#include <cstdint>

#include "jinja/error.hpp"

namespace actorlm::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Newlines normalised to \n in data and literals, as Jinja does; then
    // one trailing newline dropped (keep_trailing_newline is off).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool strip_next = false;     // the previous tag ended with "-"
    bool line_starting = true;   // the previous tag's match ended a line
    while (pos_ < src_.size()) {
      size_t open = find_open(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (strip_next) {
        size_t b = 0;
        while (b < text.size() && is_space(text[b])) ++b;
        text.erase(0, b);
      }
      if (open == src_.size()) {
        emit_text(text, pos_);
        pos_ = open;
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (modifier != '+' && (kind == '%' || kind == '#')) {
        // lstrip_blocks: only spaces/tabs between the line's start and the tag.
        const size_t nl = text.rfind('\n');
        const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
        if (nl != std::string::npos || line_starting) {
          bool blank = true;
          for (size_t i = line_start; i < text.size(); ++i) blank &= text[i] == ' ' || text[i] == '\t';
          if (blank) text.erase(line_start);
        }
      }
      emit_text(text, pos_);
      line_ = line_at(open);
      pos_ = open + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      bool strip_after = false;
      if (kind == '#') {
        size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) throw Error(Error::Kind::syntax, "unclosed comment", line_);
        strip_after = close > pos_ && src_[close - 1] == '-';
        pos_ = close + 2;
      } else if (kind == '%' && raw_block()) {
        strip_after = false;
      } else {
        out_.push_back({kind == '{' ? Token::Kind::print_open : Token::Kind::block_open, "", line_});
        strip_after = expression(kind == '{' ? '}' : '%');
        out_.push_back({kind == '{' ? Token::Kind::print_close : Token::Kind::block_close, "", line_at(pos_)});
      }
      line_starting = false;
      if (!strip_after && kind != '{' && pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;  // trim_blocks
        line_starting = true;
      }
      strip_next = strip_after;
    }
    out_.push_back({Token::Kind::end, "", line_at(src_.size())});
    return std::move(out_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  int line_at(size_t at) {
    // Lines counted incrementally (positions only move forward).
    for (; counted_ < at && counted_ < src_.size(); ++counted_) {
      if (src_[counted_] == '\n') ++counted_lines_;
    }
    return counted_lines_;
  }

  void emit_text(const std::string& text, size_t at) {
    if (!text.empty()) out_.push_back({Token::Kind::text, text, line_at(at)});
  }

  // {% raw %}...{% endraw %}: the body is data. pos_ is just inside "{%".
  bool raw_block() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && name_char(src_[p + 3]))) return false;
    p += 3;
    while (p < src_.size() && (is_space(src_[p]) || src_[p] == '-')) ++p;
    if (src_.compare(p, 2, "%}") != 0) throw Error(Error::Kind::syntax, "malformed raw tag", line_);
    const size_t body = p + 2;
    for (size_t q = body; (q = src_.find("{%", q)) != std::string::npos; q += 2) {
      size_t r = q + 2;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ++r;
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && (is_space(src_[r]) || src_[r] == '-')) ++r;
      if (src_.compare(r, 2, "%}") != 0) continue;
      emit_text(src_.substr(body, q - body), body);
      pos_ = r + 2;
      return true;
    }
    throw Error(Error::Kind::syntax, "unclosed raw block", line_);
  }

  // Tokens up to the closing "}}" or "%}" (closer is '}' or '%'); returns
  // whether it was written "-}}" / "-%}".
  bool expression(char closer) {
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) throw Error(Error::Kind::syntax, "unclosed tag", line_);
      const char c = src_[pos_];
      if (c == '-' && pos_ + 2 < src_.size() && src_[pos_ + 1] == closer && src_[pos_ + 2] == '}') {
        pos_ += 3;
        return true;
      }
      if (c == closer && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
        pos_ += 2;
        return false;
      }
      const int line = line_at(pos_);
      if (name_start(c)) {
        size_t b = pos_;
        while (pos_ < src_.size() && name_char(src_[pos_])) ++pos_;
        out_.push_back({Token::Kind::name, src_.substr(b, pos_ - b), line});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number(line);
      } else if (c == '\'' || c == '"') {
        string_literal(c, line);
      } else {
        static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two) {
          if (src_.compare(pos_, 2, t) == 0) op = t;
        }
        static const std::string singles = "+-*/%~()[]{},.:|=<>!";
        if (op.size() == 1 && singles.find(c) == std::string::npos) {
          throw Error(Error::Kind::syntax, std::string("unexpected character '") + c + "'", line);
        }
        pos_ += op.size();
        out_.push_back({Token::Kind::op, op, line});
      }
    }
  }

  void number(int line) {
    size_t b = pos_;
    bool is_float = false;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t q = pos_ + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        pos_ = q;
        digits();
      }
    }
    std::string text;
    for (size_t i = b; i < pos_; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    out_.push_back({is_float ? Token::Kind::floating : Token::Kind::integer, text, line});
  }

  void string_literal(char quote, int line) {
    std::string out;
    ++pos_;
    for (;;) {
      if (pos_ >= src_.size()) throw Error(Error::Kind::syntax, "unclosed string literal", line);
      char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) throw Error(Error::Kind::syntax, "unclosed string literal", line);
      char e = src_[pos_++];
      auto hex = [&](int n) {
        if (pos_ + static_cast<size_t>(n) > src_.size()) throw Error(Error::Kind::syntax, "bad escape", line);
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          char h = src_[pos_++];
          if (!std::isxdigit(static_cast<unsigned char>(h))) throw Error(Error::Kind::syntax, "bad escape", line);
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                                       : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '0': out += '\0'; break;
        case 'x': append_utf8(out, hex(2)); break;
        case 'u': append_utf8(out, hex(4)); break;
        case 'U': append_utf8(out, hex(8)); break;
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    out_.push_back({Token::Kind::string, out, line});
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t counted_ = 0;
  int counted_lines_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace actorlm::jinja
