#include "data/hf_tokenizer.h"

#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "data/file_access.h"
#include "data/gpt2_pretokenizer.h"

namespace gpt {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;
using Member = std::optional<element>;

// Pieces cached per tokenizer, cleared when this many are held (bounds memory on huge corpora).
constexpr size_t kCacheLimit = 1 << 20;

// Errors name the file and the field ("model.type", "pre_tokenizer.pretokenizers[0].behavior").
class Fields {
 public:
  explicit Fields(std::string file) : file_(std::move(file)) {}
  absl::Status refuse(const std::string& field, const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", field, " ", why));
  }
  // The member, or nothing where it is absent.
  static Member member(const object& o, std::string_view key) {
    element value;
    if (o[key].get(value) != simdjson::SUCCESS) return std::nullopt;
    return value;
  }
  static bool absent_or_null(const Member& e) { return !e || e->is_null(); }
  absl::StatusOr<std::string> string_of(const Member& e, const std::string& field) const {
    std::string_view s;
    if (!e) return refuse(field, "is missing");
    if (e->get_string().get(s) != simdjson::SUCCESS) return refuse(field, "is not a string");
    return std::string(s);
  }
  absl::StatusOr<object> object_of(const Member& e, const std::string& field) const {
    object o;
    if (!e) return refuse(field, "is missing");
    if (e->get_object().get(o) != simdjson::SUCCESS) return refuse(field, "is not an object");
    return o;
  }
  absl::StatusOr<array> array_of(const Member& e, const std::string& field) const {
    array a;
    if (!e) return refuse(field, "is missing");
    if (e->get_array().get(a) != simdjson::SUCCESS) return refuse(field, "is not an array");
    return a;
  }
  absl::StatusOr<int64_t> id_of(const Member& e, const std::string& field) const {
    int64_t id = -1;
    if (!e) return refuse(field, "is missing");
    if (e->get_int64().get(id) != simdjson::SUCCESS || id < 0 || id > 100'000'000) return refuse(field, "is not a valid id");
    return id;
  }
  // A boolean that must be `wanted` (or absent / null) for this implementation.
  absl::Status require_flag(const object& o, std::string_view key, bool wanted, const std::string& field,
                            const std::string& why) const {
    const Member e = member(o, key);
    if (absent_or_null(e)) return absl::OkStatus();
    bool value = false;
    if (e->get_bool().get(value) != simdjson::SUCCESS) return refuse(field, "is not a boolean");
    if (value != wanted) return refuse(field, absl::StrCat("is ", value ? "true" : "false", ": ", why));
    return absl::OkStatus();
  }
  absl::StatusOr<bool> flag(const object& o, std::string_view key, bool fallback, const std::string& field) const {
    const Member e = member(o, key);
    if (absent_or_null(e)) return fallback;
    bool value = false;
    if (e->get_bool().get(value) != simdjson::SUCCESS) return refuse(field, "is not a boolean");
    return value;
  }
  absl::StatusOr<std::string> type_of(const object& o, const std::string& field) const {
    return string_of(member(o, "type"), field + ".type");
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// A special token as tokenizer_config.json writes it: "text" or {"content": "text", ...}.
absl::StatusOr<std::string> special_token_text(const Fields& f, const Member& e, const std::string& field) {
  object o;
  if (e && e->get_object().get(o) == simdjson::SUCCESS) return f.string_of(Fields::member(o, "content"), field + ".content");
  return f.string_of(e, field);
}

absl::Status parse_pre_tokenizer(const Fields& f, const Member& e, const std::string& field,
                                 std::vector<HfTokenizer::PreTokenizerStep>& steps) {
  if (Fields::absent_or_null(e)) return absl::OkStatus();
  GPT_ASSIGN_OR_RETURN(const object o, f.object_of(e, field));
  GPT_ASSIGN_OR_RETURN(const std::string type, f.type_of(o, field));
  if (type == "Sequence") {
    GPT_ASSIGN_OR_RETURN(const array list, f.array_of(Fields::member(o, "pretokenizers"), field + ".pretokenizers"));
    size_t i = 0;
    for (element step : list) GPT_RETURN_IF_ERROR(parse_pre_tokenizer(f, step, absl::StrCat(field, ".pretokenizers[", i++, "]"), steps));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    HfTokenizer::ByteLevelStep step;
    GPT_ASSIGN_OR_RETURN(step.add_prefix_space, f.flag(o, "add_prefix_space", false, field + ".add_prefix_space"));
    GPT_ASSIGN_OR_RETURN(step.use_regex, f.flag(o, "use_regex", true, field + ".use_regex"));
    steps.emplace_back(step);
    return absl::OkStatus();
  }
  if (type == "Split") {
    GPT_RETURN_IF_ERROR(f.require_flag(o, "invert", false, field + ".invert", "inverted splits are not supported"));
    GPT_ASSIGN_OR_RETURN(const std::string behavior, f.string_of(Fields::member(o, "behavior"), field + ".behavior"));
    if (behavior != "Isolated" && behavior != "Removed") {
      return f.refuse(field + ".behavior", absl::StrCat("'", behavior, "' is not supported (Isolated or Removed)"));
    }
    GPT_ASSIGN_OR_RETURN(const object pattern, f.object_of(Fields::member(o, "pattern"), field + ".pattern"));
    const Member regex = Fields::member(pattern, "Regex"), literal = Fields::member(pattern, "String");
    const bool is_regex = !Fields::absent_or_null(regex);
    GPT_ASSIGN_OR_RETURN(const std::string text, f.string_of(is_regex ? regex : literal,
                                                             field + (is_regex ? ".pattern.Regex" : ".pattern.String")));
    GPT_ASSIGN_OR_RETURN(RegexSplit split,
                         RegexSplit::compile(text, !is_regex,
                                             behavior == "Isolated" ? RegexSplit::Behavior::kIsolated : RegexSplit::Behavior::kRemoved,
                                             absl::StrCat(f.file(), ": ", field, ".pattern")));
    steps.emplace_back(std::move(split));
    return absl::OkStatus();
  }
  return f.refuse(field + ".type", absl::StrCat("'", type, "' is not supported (ByteLevel, Split or a Sequence of them)"));
}

// The post-processor's special ids for one sequence: before it and after it.
absl::Status parse_post_processor(const Fields& f, const Member& e, const std::string& field,
                                  std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (Fields::absent_or_null(e)) return absl::OkStatus();
  GPT_ASSIGN_OR_RETURN(const object o, f.object_of(e, field));
  GPT_ASSIGN_OR_RETURN(const std::string type, f.type_of(o, field));
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only; no ids
  if (type == "Sequence") {
    GPT_ASSIGN_OR_RETURN(const array list, f.array_of(Fields::member(o, "processors"), field + ".processors"));
    size_t i = 0;
    for (element step : list) {
      GPT_RETURN_IF_ERROR(parse_post_processor(f, step, absl::StrCat(field, ".processors[", i++, "]"), prefix, suffix));
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return f.refuse(field + ".type", absl::StrCat("'", type, "' is not supported (TemplateProcessing, ByteLevel or a Sequence of them)"));
  }
  GPT_ASSIGN_OR_RETURN(const object specials, f.object_of(Fields::member(o, "special_tokens"), field + ".special_tokens"));
  GPT_ASSIGN_OR_RETURN(const array single, f.array_of(Fields::member(o, "single"), field + ".single"));
  bool after_sequence = false;
  size_t i = 0;
  for (element piece : single) {
    const std::string piece_field = absl::StrCat(field, ".single[", i++, "]");
    GPT_ASSIGN_OR_RETURN(const object p, f.object_of(piece, piece_field));
    const Member sequence = Fields::member(p, "Sequence"), special = Fields::member(p, "SpecialToken");
    if (!Fields::absent_or_null(sequence)) {
      if (after_sequence) return f.refuse(piece_field, "repeats the sequence");
      after_sequence = true;
      continue;
    }
    GPT_ASSIGN_OR_RETURN(const object s, f.object_of(special, piece_field + ".SpecialToken"));
    GPT_ASSIGN_OR_RETURN(const std::string name, f.string_of(Fields::member(s, "id"), piece_field + ".SpecialToken.id"));
    GPT_ASSIGN_OR_RETURN(const object entry, f.object_of(Fields::member(specials, name), absl::StrCat(field, ".special_tokens['", name, "']")));
    GPT_ASSIGN_OR_RETURN(const array ids, f.array_of(Fields::member(entry, "ids"), absl::StrCat(field, ".special_tokens['", name, "'].ids")));
    for (element id : ids) {
      GPT_ASSIGN_OR_RETURN(const int64_t value, f.id_of(id, absl::StrCat(field, ".special_tokens['", name, "'].ids")));
      (after_sequence ? suffix : prefix).push_back(static_cast<int32_t>(value));
    }
  }
  if (!after_sequence) return f.refuse(field + ".single", "has no Sequence");
  return absl::OkStatus();
}

absl::Status check_decoder(const Fields& f, const Member& e, const std::string& field) {
  if (Fields::absent_or_null(e)) return absl::OkStatus();
  GPT_ASSIGN_OR_RETURN(const object o, f.object_of(e, field));
  GPT_ASSIGN_OR_RETURN(const std::string type, f.type_of(o, field));
  if (type == "ByteLevel") return absl::OkStatus();
  return f.refuse(field + ".type", absl::StrCat("'", type, "' is not supported (ByteLevel)"));
}

}  // namespace

absl::StatusOr<HfTokenizer> HfTokenizer::load(const std::string& tokenizer_model) {
  std::error_code ec;
  const std::filesystem::path given(tokenizer_model);
  const std::filesystem::path json_path = std::filesystem::is_directory(given, ec) ? given / "tokenizer.json" : given;
  GPT_RETURN_IF_ERROR(check_readable_file("--tokenizer-model", json_path.string()));
  const Fields f(json_path.string());
  simdjson::padded_string text;
  if (simdjson::padded_string::load(json_path.string()).get(text) != simdjson::SUCCESS) {
    return absl::NotFoundError(absl::StrCat("cannot read --tokenizer-model ", json_path.string()));
  }
  simdjson::dom::parser parser;
  object root;
  if (parser.parse(text).get_object().get(root) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(json_path.string(), " is not a JSON object (a Hugging Face tokenizer.json)"));
  }
  for (const char* field : {"truncation", "padding"}) {
    if (!Fields::absent_or_null(Fields::member(root, field))) {
      return f.refuse(field, "is set: Megatron's documents are neither truncated nor padded by the tokenizer");
    }
  }
  if (const Member normalizer = Fields::member(root, "normalizer"); !Fields::absent_or_null(normalizer)) {
    GPT_ASSIGN_OR_RETURN(const object o, f.object_of(normalizer, "normalizer"));
    const std::string type = f.type_of(o, "normalizer").value_or("?");
    return f.refuse("normalizer", absl::StrCat("'", type, "' is not supported (only byte-level BPE without a normalizer)"));
  }

  // The model: byte-level BPE.
  GPT_ASSIGN_OR_RETURN(const object model, f.object_of(Fields::member(root, "model"), "model"));
  GPT_ASSIGN_OR_RETURN(const std::string model_type, f.type_of(model, "model"));
  if (model_type != "BPE") return f.refuse("model.type", absl::StrCat("'", model_type, "' is not supported (BPE)"));
  if (const Member dropout = Fields::member(model, "dropout"); !Fields::absent_or_null(dropout)) {
    double value = 0;
    if (dropout->get_double().get(value) != simdjson::SUCCESS || value != 0.0) {
      return f.refuse("model.dropout", "is set: BPE dropout is not supported");
    }
  }
  GPT_RETURN_IF_ERROR(f.require_flag(model, "byte_fallback", false, "model.byte_fallback",
                                     "byte-fallback BPE (SentencePiece-style <0x..> tokens) is not supported"));
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Member e = Fields::member(model, affix);
    if (Fields::absent_or_null(e)) continue;
    GPT_ASSIGN_OR_RETURN(const std::string value, f.string_of(e, absl::StrCat("model.", affix)));
    if (!value.empty()) return f.refuse(absl::StrCat("model.", affix), absl::StrCat("'", value, "' is not supported"));
  }
  HfTokenizer tokenizer;
  GPT_ASSIGN_OR_RETURN(tokenizer.ignore_merges_, f.flag(model, "ignore_merges", false, "model.ignore_merges"));

  // The vocabulary: the model's and the added tokens, by id (an added token that is also a model
  // token keeps the model's text: the same id either way).
  std::vector<std::string> tokens;
  size_t distinct = 0;
  auto place = [&](int64_t id, std::string_view token) {
    if (static_cast<size_t>(id) >= tokens.size()) tokens.resize(static_cast<size_t>(id) + 1);
    std::string& slot = tokens[static_cast<size_t>(id)];
    if (slot.empty()) {
      slot = std::string(token);
      ++distinct;
    }
  };
  GPT_ASSIGN_OR_RETURN(const object vocab, f.object_of(Fields::member(model, "vocab"), "model.vocab"));
  for (auto [key, value] : vocab) {
    const std::string field = absl::StrCat("model.vocab['", std::string(key), "']");
    GPT_ASSIGN_OR_RETURN(const int64_t id, f.id_of(value, field));
    place(id, key);
  }
  const Member added = Fields::member(root, "added_tokens");
  if (!Fields::absent_or_null(added)) {
    GPT_ASSIGN_OR_RETURN(const array list, f.array_of(added, "added_tokens"));
    size_t i = 0;
    for (element entry : list) {
      const std::string field = absl::StrCat("added_tokens[", i++, "]");
      GPT_ASSIGN_OR_RETURN(const object o, f.object_of(entry, field));
      for (const char* option : {"lstrip", "rstrip", "single_word"}) {
        GPT_RETURN_IF_ERROR(f.require_flag(o, option, false, absl::StrCat(field, ".", option), "is not supported"));
      }
      GPT_ASSIGN_OR_RETURN(const std::string content, f.string_of(Fields::member(o, "content"), field + ".content"));
      GPT_ASSIGN_OR_RETURN(const int64_t id, f.id_of(Fields::member(o, "id"), field + ".id"));
      if (content.empty()) return f.refuse(field + ".content", "is empty");
      place(id, content);
      tokenizer.added_tokens_.push_back({content, static_cast<int32_t>(id)});
      tokenizer.added_first_byte_[static_cast<uint8_t>(content.front())] = true;
    }
  }
  if (distinct != tokens.size()) {
    return f.refuse("model.vocab", absl::StrCat("and added_tokens leave ids unused (", distinct, " tokens, ids up to ",
                                                tokens.size() - 1, "); Megatron's vocabulary size is len(tokenizer)"));
  }
  std::stable_sort(tokenizer.added_tokens_.begin(), tokenizer.added_tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });

  // The merges: "left right" strings (tokenizers before 0.20) or ["left", "right"] pairs.
  std::vector<std::pair<std::string, std::string>> merges;
  GPT_ASSIGN_OR_RETURN(const array merge_list, f.array_of(Fields::member(model, "merges"), "model.merges"));
  size_t rank = 0;
  for (element merge : merge_list) {
    const std::string field = absl::StrCat("model.merges[", rank++, "]");
    std::string_view line;
    array pair;
    if (merge.get_string().get(line) == simdjson::SUCCESS) {
      const size_t space = line.find(' ');
      if (space == std::string_view::npos) return f.refuse(field, "is not a merge ('left right')");
      merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
    } else if (merge.get_array().get(pair) == simdjson::SUCCESS && pair.size() == 2) {
      GPT_ASSIGN_OR_RETURN(std::string left, f.string_of(pair.at(0).value_unsafe(), field + "[0]"));
      GPT_ASSIGN_OR_RETURN(std::string right, f.string_of(pair.at(1).value_unsafe(), field + "[1]"));
      merges.emplace_back(std::move(left), std::move(right));
    } else {
      return f.refuse(field, "is neither 'left right' nor [left, right]");
    }
  }
  GPT_ASSIGN_OR_RETURN(tokenizer.bpe_, ByteLevelBpe::build(std::move(tokens), merges, json_path.string() + ": model"));

  GPT_RETURN_IF_ERROR(parse_pre_tokenizer(f, Fields::member(root, "pre_tokenizer"), "pre_tokenizer", tokenizer.pre_tokenizer_));
  GPT_RETURN_IF_ERROR(parse_post_processor(f, Fields::member(root, "post_processor"), "post_processor",
                                           tokenizer.prefix_ids_, tokenizer.suffix_ids_));
  for (int32_t id : tokenizer.prefix_ids_) {
    if (id >= tokenizer.bpe_.size()) return f.refuse("post_processor", absl::StrCat("adds the id ", id, ", outside the vocabulary"));
  }
  for (int32_t id : tokenizer.suffix_ids_) {
    if (id >= tokenizer.bpe_.size()) return f.refuse("post_processor", absl::StrCat("adds the id ", id, ", outside the vocabulary"));
  }
  GPT_RETURN_IF_ERROR(check_decoder(f, Fields::member(root, "decoder"), "decoder"));

  // The end-of-document id: tokenizer_config.json's eos_token (transformers' eos_token_id).
  const std::string config_path = (json_path.parent_path() / "tokenizer_config.json").string();
  const std::string eos_needed = absl::StrCat(
      "HuggingFaceTokenizer's end-of-document id is the eos_token of ", config_path,
      " (Megatron's eod is transformers' eos_token_id)");
  if (!std::filesystem::is_regular_file(config_path, ec)) return absl::NotFoundError(absl::StrCat("no ", config_path, ": ", eos_needed));
  simdjson::padded_string config_text;
  simdjson::dom::parser config_parser;
  object config;
  if (simdjson::padded_string::load(config_path).get(config_text) != simdjson::SUCCESS ||
      config_parser.parse(config_text).get_object().get(config) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, " is not a JSON object"));
  }
  const Member eos = Fields::member(config, "eos_token");
  if (Fields::absent_or_null(eos)) return absl::InvalidArgumentError(absl::StrCat(config_path, " has no eos_token: ", eos_needed));
  GPT_ASSIGN_OR_RETURN(const std::string eos_text, special_token_text(Fields(config_path), eos, "eos_token"));
  tokenizer.eod_id_ = -1;
  for (const AddedToken& token : tokenizer.added_tokens_) {
    if (token.content == eos_text) tokenizer.eod_id_ = token.id;
  }
  if (tokenizer.eod_id_ < 0) tokenizer.eod_id_ = tokenizer.bpe_.find(eos_text);
  if (tokenizer.eod_id_ < 0) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": eos_token '", eos_text, "' is not a token of ", json_path.string()));
  }
  return tokenizer;
}

const HfTokenizer::AddedToken* HfTokenizer::added_token_at(std::string_view text, size_t i) const {
  for (const AddedToken& token : added_tokens_) {  // longest first
    if (text.compare(i, token.content.size(), token.content) == 0) return &token;
  }
  return nullptr;
}

void HfTokenizer::encode_stretch(std::string_view text, std::vector<int32_t>& out) {
  pieces_.clear();
  pieces_.emplace_back(text);
  for (PreTokenizerStep& step : pre_tokenizer_) {
    next_pieces_.clear();
    if (auto* split = std::get_if<RegexSplit>(&step)) {
      for (const std::string& piece : pieces_) split->split(piece, next_pieces_);
    } else {
      const ByteLevelStep& byte_level = std::get<ByteLevelStep>(step);
      std::vector<std::string_view> views;
      for (std::string& piece : pieces_) {
        // As the Rust library: every piece reaching ByteLevel gets the space, not only the text's first.
        if (byte_level.add_prefix_space && (piece.empty() || piece.front() != ' ')) piece.insert(piece.begin(), ' ');
        if (!byte_level.use_regex) {
          next_pieces_.push_back(std::move(piece));
          continue;
        }
        views.clear();
        gpt2_pretokenize(piece, views);
        for (std::string_view view : views) next_pieces_.emplace_back(view);
      }
    }
    std::swap(pieces_, next_pieces_);
  }
  for (const std::string& piece : pieces_) {
    if (piece.empty()) continue;
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      continue;
    }
    const size_t before = out.size();
    bpe_.encode_piece(piece, ignore_merges_, out);
    if (cache_.size() >= kCacheLimit) cache_.clear();
    cache_.emplace(piece, std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
  }
}

void HfTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  size_t start = 0;  // of the stretch not yet encoded
  for (size_t i = 0; i < text.size();) {
    const AddedToken* token = added_first_byte_[static_cast<uint8_t>(text[i])] ? added_token_at(text, i) : nullptr;
    if (!token) {
      ++i;
      continue;
    }
    if (i > start) encode_stretch(text.substr(start, i - start), out);
    out.push_back(token->id);
    i += token->content.size();
    start = i;
  }
  if (start < text.size()) encode_stretch(text.substr(start), out);
  out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) bpe_.append_bytes(id, bytes);
  return bytes;
}

}  // namespace gpt
