// HuggingFaceTokenizer on small tokenizer.json files written here: merges in both spellings,
// ignore_merges, added tokens, the post-processor's template, Split behaviours, and the refusal of
// every field it cannot honour, by name. (Parity with tokenizers.js on real vocabularies:
// tests/integration/hf_tokenizer_parity_test.py.)
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "data/byte_level_bpe.h"
#include "data/hf_tokenizer.h"
#include "data/regex_split.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

std::string utf8(uint32_t c) {
  std::string out;
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
  return out;
}

std::string json_string(const std::string& text) {
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"");
}

// Ids: the 256 byte tokens in byte order (id = byte), then "he" 256, "ll" 257, "hell" 258,
// "hello" 259, "abc" 260 (no merge makes it), added tokens "<s>" 261, "<s>x" 262.
struct Spec {
  std::string merges = R"(["h e", "l l", "he ll", "hell o"])";
  bool ignore_merges = false;
  std::string pre_tokenizer = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  std::string post_processor = "null";
  std::string normalizer = "null";
  std::string model_type = "BPE";
  std::string model_extra;
  std::string added_extra;
  std::string decoder = R"({"type": "ByteLevel"})";
  std::string config = R"({"eos_token": "<s>"})";
};

std::string write(const Spec& spec, const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("hf_tokenizer_test_" + name);
  std::filesystem::create_directories(dir);
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += absl::StrCat(json_string(utf8(gpt2_byte_to_unicode(static_cast<uint8_t>(b)))), ": ", b, ", ");
  vocab += R"("he": 256, "ll": 257, "hell": 258, "hello": 259, "abc": 260)";
  std::ofstream(dir / "tokenizer.json") << absl::StrCat(
      R"({"version": "1.0", "truncation": null, "padding": null, "normalizer": )", spec.normalizer,
      R"(, "added_tokens": [{"id": 261, "content": "<s>", "special": true}, {"id": 262, "content": "<s>x", "special": false)",
      spec.added_extra, R"(}], "pre_tokenizer": )", spec.pre_tokenizer, R"(, "post_processor": )", spec.post_processor,
      R"(, "decoder": )", spec.decoder, R"(, "model": {"type": ")", spec.model_type, R"(", "dropout": null, "ignore_merges": )",
      spec.ignore_merges ? "true" : "false", spec.model_extra, R"(, "vocab": {)", vocab, R"(}, "merges": )", spec.merges, "}}");
  if (!spec.config.empty()) std::ofstream(dir / "tokenizer_config.json") << spec.config;
  return dir.string();
}

std::vector<int32_t> encode(HfTokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> ids;
  tokenizer.encode(text, ids);
  return ids;
}

using Ids = std::vector<int32_t>;

TEST(HfTokenizer, MergesInBothSpellingsAddedTokensAndDecode) {
  auto loaded = HfTokenizer::load(write(Spec{}, "strings"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Spec pairs;
  pairs.merges = R"([["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o"]])";
  auto paired = HfTokenizer::load(write(pairs, "pairs") + "/tokenizer.json");  // the file itself
  ASSERT_TRUE(paired.ok()) << paired.status();
  EXPECT_EQ(loaded->vocab_size(), 263);
  EXPECT_EQ(loaded->eod_id(), 261);
  const std::string text = "hello hell<s>x<s>abc";
  // "hello", " " "hell" (no " h" merge: byte ' ' then "hell"), "<s>x" (longest added token), "<s>", a b c.
  const Ids expected = {259, ' ', 258, 262, 261, 'a', 'b', 'c'};
  EXPECT_EQ(encode(*loaded, text), expected);
  EXPECT_EQ(encode(*paired, text), expected);
  EXPECT_EQ(loaded->decode(expected), text);
  const Ids bytes = {0xE2, 0x82, 0xAC};  // "€" as three byte tokens
  EXPECT_EQ(encode(*loaded, "\xE2\x82\xAC"), bytes);
  EXPECT_EQ(loaded->decode(bytes), "\xE2\x82\xAC");
}

TEST(HfTokenizer, IgnoreMergesTakesAWholePieceThatIsAToken) {
  Spec spec;
  auto plain = HfTokenizer::load(write(spec, "merges"));
  spec.ignore_merges = true;
  auto whole = HfTokenizer::load(write(spec, "ignore_merges"));
  ASSERT_TRUE(plain.ok() && whole.ok());
  EXPECT_EQ(encode(*plain, "abc"), (Ids{'a', 'b', 'c'}));
  EXPECT_EQ(encode(*whole, "abc"), (Ids{260}));
}

TEST(HfTokenizer, TemplateAddsItsSpecialTokensAndSplitBehaviours) {
  Spec spec;
  spec.post_processor = R"({"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [261], "tokens": ["<s>"]}}}]})";
  // Removed: the commas go; no regex after the split, so " hello" stays one piece with its space.
  spec.pre_tokenizer = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"String": ","}, "behavior": "Removed", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  auto loaded = HfTokenizer::load(write(spec, "template"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(encode(*loaded, "hello,,abc"), (Ids{261, 259, 'a', 'b', 'c', 261}));
  EXPECT_EQ(encode(*loaded, ""), (Ids{261, 261}));
}

TEST(RegexSplit, OnigurumaWhiteSpaceAndIsolatedPieces) {
  EXPECT_EQ(oniguruma_to_icu_pattern(R"(\s+(?!\S)|[^\s\p{L}]|\\s)"),
            R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}]|\\s)");
  auto split = RegexSplit::compile(R"(\s+)", false, RegexSplit::Behavior::kIsolated, "test");
  ASSERT_TRUE(split.ok());
  std::vector<std::string> pieces;
  split->split("a\x0B\xC2\x85" "b c", pieces);  // U+000B and U+0085 are Oniguruma's \s, not ICU's
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "\x0B\xC2\x85", "b", " ", "c"}));
  EXPECT_FALSE(RegexSplit::compile("(unclosed", false, RegexSplit::Behavior::kIsolated, "test").ok());
}

// Each unsupported field is refused with its name in the message.
TEST(HfTokenizer, RefusesWhatItCannotHonourNamingTheField) {
  struct Case {
    std::string name;
    std::function<void(Spec&)> change;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"normalizer", [](Spec& s) { s.normalizer = R"({"type": "NFC"})"; }, "normalizer 'NFC'"},
      {"model_type", [](Spec& s) { s.model_type = "WordPiece"; }, "model.type 'WordPiece'"},
      {"byte_fallback", [](Spec& s) { s.model_extra = R"(, "byte_fallback": true)"; }, "model.byte_fallback"},
      {"suffix", [](Spec& s) { s.model_extra = R"(, "end_of_word_suffix": "</w>")"; }, "model.end_of_word_suffix"},
      {"lstrip", [](Spec& s) { s.added_extra = R"(, "lstrip": true)"; }, "added_tokens[1].lstrip"},
      {"pre_type", [](Spec& s) { s.pre_tokenizer = R"({"type": "Whitespace"})"; }, "pre_tokenizer.type 'Whitespace'"},
      {"behavior",
       [](Spec& s) {
         s.pre_tokenizer = R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "a"},
             "behavior": "MergedWithPrevious", "invert": false}]})";
       },
       "pre_tokenizer.pretokenizers[0].behavior 'MergedWithPrevious'"},
      {"regex",
       [](Spec& s) { s.pre_tokenizer = R"({"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"})"; },
       "pre_tokenizer.pattern: the regex '(a' does not compile"},
      {"post", [](Spec& s) { s.post_processor = R"({"type": "BertProcessing"})"; }, "post_processor.type 'BertProcessing'"},
      {"decoder", [](Spec& s) { s.decoder = R"({"type": "WordPiece"})"; }, "decoder.type 'WordPiece'"},
      {"merge", [](Spec& s) { s.merges = R"(["h x"])"; }, "merge 'h x' (rank 0) uses tokens missing"},
      {"no_config", [](Spec& s) { s.config.clear(); }, "eos_token"},
      {"no_eos", [](Spec& s) { s.config = R"({"bos_token": "<s>"})"; }, "has no eos_token"},
      {"bad_eos", [](Spec& s) { s.config = R"({"eos_token": {"content": "</s>"}})"; }, "eos_token '</s>' is not a token"},
  };
  for (const Case& c : cases) {
    Spec spec;
    c.change(spec);
    // A fresh directory per case: "no_config" must not find an earlier case's tokenizer_config.json.
    auto loaded = HfTokenizer::load(write(spec, c.name));
    ASSERT_FALSE(loaded.ok()) << c.name;
    EXPECT_NE(std::string(loaded.status().message()).find(c.field), std::string::npos)
        << c.name << ": " << loaded.status().message();
  }
  EXPECT_FALSE(HfTokenizer::load("/nonexistent/tokenizer.json").ok());
}

}  // namespace
}  // namespace gpt
