// The libgpt_sentencepiece.so module (sentencepiece_model.h): Debian's SentencePieceProcessor
// behind gpt::SentencePieceModel. No Abseil header may be included here.
#include "data/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace gpt {
namespace {

class LibSentencePieceModel final : public SentencePieceModel {
 public:
  bool load(const std::string& path, std::string& error) {
    const auto status = processor_.Load(path);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  int piece_size() const override { return processor_.GetPieceSize(); }
  int piece_id(const std::string& piece) const override {
    const int id = processor_.PieceToId(piece);
    // PieceToId answers unk_id for any text that is not a piece.
    if (id == processor_.unk_id() && piece != processor_.IdToPiece(id)) return -1;
    return id;
  }
  std::string piece(int id) const override { return processor_.IdToPiece(id); }
  int bos_id() const override { return processor_.bos_id(); }
  int eos_id() const override { return processor_.eos_id(); }
  int pad_id() const override { return processor_.pad_id(); }
  int unk_id() const override { return processor_.unk_id(); }
  bool encode(std::string_view text, std::vector<int>& ids, std::string& error) const override {
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const override {
    const auto status = processor_.Decode(ids, &text);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace
}  // namespace gpt

extern "C" __attribute__((visibility("default"))) gpt::SentencePieceModel* gpt_load_sentencepiece_model(
    const std::string& path, std::string& error) {
  auto* model = new gpt::LibSentencePieceModel();
  if (!model->load(path, error)) {
    delete model;
    return nullptr;
  }
  return model;
}
