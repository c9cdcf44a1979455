#include "data/megatron_description.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace gpt {
namespace {

void append_escaped_code_unit(std::string& out, uint32_t unit) {
  char buffer[8];
  std::snprintf(buffer, sizeof(buffer), "\\u%04x", unit);
  out += buffer;
}

// The length of the well-formed UTF-8 sequence starting at text[i] (Python's strict decoder: no
// overlong forms, no encoded surrogates, nothing above U+10FFFF), or 0.
size_t utf8_sequence_length(const std::string& text, size_t i, uint32_t& code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code_point = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code_point = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code_point = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    const unsigned char next = byte(i + k);
    if (next < (k == 1 ? low : 0x80) || next > (k == 1 ? high : 0xBF)) return 0;
    code_point = code_point << 6 | (next & 0x3F);
  }
  return length;
}

// json.dumps(..., indent=4) of the values used here.
class JsonWriter {
 public:
  std::string text;

  void open(char bracket) {
    text += bracket;
    ++depth_;
    first_ = true;
  }
  void close(char bracket) {
    --depth_;
    if (!first_) newline();  // an empty container stays "[]" / "{}"
    text += bracket;
    first_ = false;
  }
  void key(const std::string& name) {
    element();
    text += json_string(name);
    text += ": ";
    pending_value_ = true;
  }
  void value(const std::string& raw) {
    if (!pending_value_) element();
    pending_value_ = false;
    text += raw;
  }
  void open_value(char bracket) {
    if (!pending_value_) element();
    pending_value_ = false;
    open(bracket);
  }

 private:
  void element() {
    if (!first_) text += ',';
    newline();
    first_ = false;
  }
  void newline() {
    text += '\n';
    text.append(static_cast<size_t>(4 * depth_), ' ');
  }
  int depth_ = 0;
  bool first_ = true;
  bool pending_value_ = false;
};

}  // namespace

TokenizerIdentity TokenizerIdentity::gpt2_bpe(const std::string& vocab_file, const std::string& merge_file) {
  return {.class_name = "_GPT2BPETokenizer", .paths = {vocab_file, merge_file}, .options = {}};
}

TokenizerIdentity TokenizerIdentity::null_tokenizer(int64_t vocab_size) {
  return {.class_name = "_NullTokenizer", .paths = {std::nullopt}, .options = {{"vocab_size", absl::StrCat(vocab_size)}}};
}

TokenizerIdentity TokenizerIdentity::with_model(const std::string& tokenizer_type, const std::string& tokenizer_model) {
  // _HuggingFaceTokenizer passes pretrain_gpt's kwargs (none) as its options.
  if (tokenizer_type == "HuggingFaceTokenizer") return {.class_name = "_HuggingFaceTokenizer", .paths = {tokenizer_model}, .options = {}};
  return {.class_name = absl::StrCat("_", tokenizer_type), .paths = {tokenizer_model}, .options = {{"vocab_extra_ids", "0"}}};
}

std::string python_float_repr(double value) {
  GPT_CHECK(std::isfinite(value)) << value;
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  GPT_CHECK(result.ec == std::errc());
  // "-d.ddde-05" -> sign, digits "dddd", exponent -5.
  const std::string scientific(buffer, result.ptr);
  const size_t e = scientific.find('e');
  std::string digits;
  bool negative = false;
  for (size_t i = 0; i < e; ++i) {
    if (scientific[i] == '-') negative = true;
    if (scientific[i] >= '0' && scientific[i] <= '9') digits += scientific[i];
  }
  const int exponent = std::atoi(scientific.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent <= 15) {
    if (exponent < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out += digits;
    } else {
      const size_t integer_digits = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= integer_digits) {
        out += digits;
        out.append(integer_digits - digits.size(), '0');
        out += ".0";
      } else {
        out.append(digits, 0, integer_digits);
        out += '.';
        out.append(digits, integer_digits);
      }
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char exponent_text[16];
    std::snprintf(exponent_text, sizeof(exponent_text), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exponent_text;
  }
  return out;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7F) {
            append_escaped_code_unit(out, c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    uint32_t code_point = 0;
    const size_t length = utf8_sequence_length(text, i, code_point);
    if (length == 0) {
      append_escaped_code_unit(out, 0xDC00 + c);  // surrogateescape
      ++i;
      continue;
    }
    if (code_point >= 0x10000) {
      code_point -= 0x10000;
      append_escaped_code_unit(out, 0xD800 + (code_point >> 10));
      append_escaped_code_unit(out, 0xDC00 + (code_point & 0x3FF));
    } else {
      append_escaped_code_unit(out, code_point);
    }
    i += length;
  }
  return out + "\"";
}

std::string megatron_dataset_description(const MegatronDatasetIdentity& identity) {
  JsonWriter json;
  json.open('{');
  json.key("class");
  json.value(json_string("GPTDataset"));
  json.key("dataset_path");
  json.value(json_string(identity.dataset_path));
  json.key("num_samples");
  json.value(identity.num_samples ? absl::StrCat(*identity.num_samples) : "null");
  json.key("index_split");
  json.value(json_string(identity.index_split));
  json.key("random_seed");
  json.value(absl::StrCat(identity.random_seed));
  json.key("sequence_length");
  json.value(absl::StrCat(identity.sequence_length));
  json.key("split");
  json.value(json_string(identity.split));
  json.key("split_matrix");
  json.open_value('[');
  for (int i = 0; i < 3; ++i) {
    const auto& bookends = identity.split_matrix[static_cast<size_t>(i)];
    if (!bookends) {
      json.value("null");
      continue;
    }
    json.open_value('[');
    // The first book-end of all is the integer 0 Megatron's running sum starts from.
    json.value(i == 0 ? "0" : python_float_repr(bookends->first));
    json.value(python_float_repr(bookends->second));
    json.close(']');
  }
  json.close(']');
  json.key("tokenizer");
  json.open_value('{');
  json.key("class");
  json.value(json_string(identity.tokenizer.class_name));
  json.key("tokenizer_path");
  json.open_value('[');
  for (const auto& path : identity.tokenizer.paths) json.value(path ? json_string(*path) : "null");
  json.close(']');
  for (const auto& [name, value] : identity.tokenizer.options) {
    json.key(name);
    json.value(json_string(value));
  }
  json.close('}');
  json.close('}');
  return json.text;
}

}  // namespace gpt
