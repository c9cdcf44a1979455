#include "train/args/moe_layer_pattern.h"

#include <cctype>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "core/strict_number.h"

namespace gpt {
namespace {

// The longest list an expression may build: far beyond any model's layer count, small enough
// to allocate.
constexpr int64_t kMaxElements = int64_t{1} << 24;

// A value of the expression: an int or a list of ints.
using Value = std::variant<int64_t, std::vector<int64_t>>;

class PatternParser {
 public:
  explicit PatternParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Value> parse() {
    absl::StatusOr<Value> value = expression();
    if (!value.ok()) return value;
    skip_spaces();
    if (pos_ != text_.size()) return error(absl::StrCat("unexpected '", std::string(text_.substr(pos_, 1)), "'"));
    return value;
  }

 private:
  absl::Status error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " at character ", pos_ + 1));
  }
  void skip_spaces() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool accept(char c) {
    skip_spaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // expression := term ('+' term)*   (lists concatenate, ints add)
  absl::StatusOr<Value> expression() {
    absl::StatusOr<Value> left = term();
    while (left.ok() && accept('+')) {
      absl::StatusOr<Value> right = term();
      if (!right.ok()) return right;
      left = combine_add(std::move(*left), std::move(*right));
    }
    return left;
  }
  // term := factor ('*' factor)*   (a list times an int repeats it, ints multiply)
  absl::StatusOr<Value> term() {
    absl::StatusOr<Value> left = factor();
    while (left.ok() && accept('*')) {
      absl::StatusOr<Value> right = factor();
      if (!right.ok()) return right;
      left = combine_multiply(std::move(*left), std::move(*right));
    }
    return left;
  }
  // factor := int | '[' [expression (',' expression)*] ']' | '(' expression ')'
  absl::StatusOr<Value> factor() {
    skip_spaces();
    if (accept('(')) {
      absl::StatusOr<Value> inner = expression();
      if (inner.ok() && !accept(')')) return error("missing ')'");
      return inner;
    }
    if (accept('[')) {
      std::vector<int64_t> items;
      if (accept(']')) return Value(std::move(items));
      do {
        absl::StatusOr<Value> item = expression();
        if (!item.ok()) return item;
        if (!std::holds_alternative<int64_t>(*item)) return error("a list inside a list");
        items.push_back(std::get<int64_t>(*item));
      } while (accept(','));
      if (!accept(']')) return error("missing ']'");
      return Value(std::move(items));
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_) return error(pos_ < text_.size() ? "expected a number, '[' or '('" : "unexpected end");
    absl::StatusOr<int64_t> number = parse_decimal_integer(text_.substr(start, pos_ - start), 0, kMaxElements);
    if (!number.ok()) return error(absl::StrCat("number ", std::string(text_.substr(start, pos_ - start)), " too large"));
    return Value(*number);
  }

  absl::StatusOr<Value> combine_add(Value a, Value b) const {
    if (std::holds_alternative<int64_t>(a) && std::holds_alternative<int64_t>(b)) {
      const int64_t sum = std::get<int64_t>(a) + std::get<int64_t>(b);  // both <= kMaxElements
      if (sum > kMaxElements) return error("a number too large");
      return Value(sum);
    }
    if (!std::holds_alternative<std::vector<int64_t>>(a) || !std::holds_alternative<std::vector<int64_t>>(b))
      return error("'+' between a list and a number");
    std::vector<int64_t>& left = std::get<std::vector<int64_t>>(a);
    const std::vector<int64_t>& right = std::get<std::vector<int64_t>>(b);
    if (static_cast<int64_t>(left.size() + right.size()) > kMaxElements) return error("a list too long");
    left.insert(left.end(), right.begin(), right.end());
    return a;
  }
  absl::StatusOr<Value> combine_multiply(Value a, Value b) const {
    if (std::holds_alternative<int64_t>(a) && std::holds_alternative<int64_t>(b)) {
      const std::optional<int64_t> product = checked_multiply(std::get<int64_t>(a), std::get<int64_t>(b));
      if (!product || *product > kMaxElements) return error("a number too large");
      return Value(*product);
    }
    if (std::holds_alternative<int64_t>(a)) std::swap(a, b);
    if (!std::holds_alternative<int64_t>(b)) return error("'*' between two lists");
    const std::vector<int64_t>& list = std::get<std::vector<int64_t>>(a);
    const int64_t times = std::get<int64_t>(b);
    const std::optional<int64_t> size = checked_multiply(static_cast<int64_t>(list.size()), times);
    if (!size || *size > kMaxElements) return error("a list too long");
    std::vector<int64_t> repeated;
    repeated.reserve(static_cast<size_t>(*size));
    for (int64_t i = 0; i < times; ++i) repeated.insert(repeated.end(), list.begin(), list.end());
    return Value(std::move(repeated));
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<bool>> moe_layer_pattern(std::string_view text, int64_t num_layers) {
  if (num_layers < 1 || num_layers > kMaxElements)
    return absl::InvalidArgumentError(absl::StrCat("cannot pattern ", num_layers, " layers"));
  std::vector<bool> pattern(static_cast<size_t>(num_layers), false);
  if (text.find('[') == std::string_view::npos) {  // Megatron: an int unless the text holds a list
    absl::StatusOr<int64_t> every = parse_decimal_integer(text, 1);
    if (!every.ok()) return absl::InvalidArgumentError(absl::StrCat("must be a positive int or a list expression (got ", std::string(text), ")"));
    for (int64_t i = 0; i < num_layers; i += *every) pattern[static_cast<size_t>(i)] = true;
    return pattern;
  }
  absl::StatusOr<Value> value = PatternParser(text).parse();
  if (!value.ok()) return absl::InvalidArgumentError(absl::StrCat("cannot read ", std::string(text), ": ", value.status().message()));
  if (!std::holds_alternative<std::vector<int64_t>>(*value))
    return absl::InvalidArgumentError(absl::StrCat("must give a list (got ", std::string(text), ")"));
  const std::vector<int64_t>& list = std::get<std::vector<int64_t>>(*value);
  if (static_cast<int64_t>(list.size()) != num_layers)
    return absl::InvalidArgumentError(absl::StrCat("gives ", list.size(), " entries for ", num_layers,
                                                   " layers (one 0 or 1 per layer)"));
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] != 0 && list[i] != 1)
      return absl::InvalidArgumentError(absl::StrCat("entry ", i, " is ", list[i], " (each must be 0 or 1)"));
    pattern[i] = list[i] == 1;
  }
  return pattern;
}

}  // namespace gpt
