// A thin wrapper of libsentencepiece's SentencePieceProcessor in standard types only: its header
// declares its own absl::string_view, which clashes with Abseil's, so it is included in
// sentencepiece_model.cc alone (a translation unit without Abseil). Built only with the library.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpt {

class SentencePieceModel {
 public:
  // The model, or null with `error` set.
  static std::shared_ptr<const SentencePieceModel> load(const std::string& path, std::string& error);
  ~SentencePieceModel();

  int piece_size() const;
  // The piece's id, or -1 where the text is not a piece.
  int piece_id(const std::string& piece) const;
  std::string piece(int id) const;
  int bos_id() const;
  int eos_id() const;
  int pad_id() const;
  int unk_id() const;
  // Encode and Decode are const in the library and safe to call from several threads.
  bool encode(std::string_view text, std::vector<int>& ids, std::string& error) const;
  bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const;

 private:
  struct Impl;
  SentencePieceModel();
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpt
