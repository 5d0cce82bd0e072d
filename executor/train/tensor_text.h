#pragma once
// How the training code names a tensor in an error message: "[8, 64] Long".

#include <sstream>
#include <string>

#include <torch/types.h>

namespace mfsdp::executor {

inline std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << ']';
  return out.str();
}

inline std::string tensor_text(const at::Tensor& t) {
  return shape_text(t.sizes()) + " " + std::string(c10::toString(t.scalar_type()));
}

}  // namespace mfsdp::executor
