// GPT-2's pre-tokenization: the text is cut into pieces by the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (alternatives tried in this order at each position, as tiktoken's Rust regex and gpt-3-encoder's
// JavaScript regex do). Implemented as a scanner over code points rather than a regex engine, for
// speed; letters, numbers and white space are Unicode's (ICU's General_Category and White_Space).
#pragma once

#include <string_view>
#include <vector>

namespace gpt {

// Appends the byte ranges of `text`'s pieces to `pieces` (views into `text`).
void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace gpt
