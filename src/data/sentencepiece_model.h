// libsentencepiece's SentencePieceProcessor behind an interface in standard types, built as a
// module of its own (libgpt_sentencepiece.so, sentencepiece_model.cc) and opened with dlopen's
// RTLD_DEEPBIND. Debian's libsentencepiece carries its own copy of protobuf 3.14 under protobuf's
// names, while pretrain_gpt links Debian's libprotobuf (the TensorBoard writer): linked together,
// the library's protobuf calls land in the newer runtime, which aborts its version check. Opened
// with its own symbols first, the library keeps its protobuf. (Its header also declares its own
// absl::string_view, which clashes with Abseil's: only the module includes it.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpt {

class SentencePieceModel {
 public:
  virtual ~SentencePieceModel() = default;
  virtual int piece_size() const = 0;
  // The piece's id, or -1 where the text is not a piece.
  virtual int piece_id(const std::string& piece) const = 0;
  virtual std::string piece(int id) const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int pad_id() const = 0;
  virtual int unk_id() const = 0;
  // Encode and Decode are const in the library and safe to call from several threads.
  virtual bool encode(std::string_view text, std::vector<int>& ids, std::string& error) const = 0;
  virtual bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const = 0;
};

// The module's one entry point (extern "C", found with dlsym): the model at `path`, or null with
// `error` set.
using LoadSentencePieceModel = SentencePieceModel* (*)(const std::string& path, std::string& error);
inline constexpr char kLoadSentencePieceModel[] = "gpt_load_sentencepiece_model";

}  // namespace gpt
