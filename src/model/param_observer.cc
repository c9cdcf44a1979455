#include "model/param_observer.h"

namespace gpt {

const char* to_string(ParamUse use) {
  switch (use) {
    case ParamUse::kForward: return "forward";
    case ParamUse::kRecompute: return "recompute";
    case ParamUse::kBackward: return "backward";
  }
  return "?";
}

}  // namespace gpt
