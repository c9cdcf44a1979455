#include "data/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace gpt {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceModel::SentencePieceModel() : impl_(std::make_unique<Impl>()) {}
SentencePieceModel::~SentencePieceModel() = default;

std::shared_ptr<const SentencePieceModel> SentencePieceModel::load(const std::string& path, std::string& error) {
  std::shared_ptr<SentencePieceModel> model(new SentencePieceModel());
  const auto status = model->impl_->processor.Load(path);
  if (!status.ok()) {
    error = status.ToString();
    return nullptr;
  }
  return model;
}

int SentencePieceModel::piece_size() const { return impl_->processor.GetPieceSize(); }
int SentencePieceModel::piece_id(const std::string& piece) const {
  const int id = impl_->processor.PieceToId(piece);
  // PieceToId answers unk_id for any text that is not a piece.
  if (id == impl_->processor.unk_id() && piece != impl_->processor.IdToPiece(id)) return -1;
  return id;
}
std::string SentencePieceModel::piece(int id) const { return impl_->processor.IdToPiece(id); }
int SentencePieceModel::bos_id() const { return impl_->processor.bos_id(); }
int SentencePieceModel::eos_id() const { return impl_->processor.eos_id(); }
int SentencePieceModel::pad_id() const { return impl_->processor.pad_id(); }
int SentencePieceModel::unk_id() const { return impl_->processor.unk_id(); }

bool SentencePieceModel::encode(std::string_view text, std::vector<int>& ids, std::string& error) const {
  const auto status = impl_->processor.Encode(text, &ids);
  if (!status.ok()) error = status.ToString();
  return status.ok();
}

bool SentencePieceModel::decode(const std::vector<int>& ids, std::string& text, std::string& error) const {
  const auto status = impl_->processor.Decode(ids, &text);
  if (!status.ok()) error = status.ToString();
  return status.ok();
}

}  // namespace gpt
