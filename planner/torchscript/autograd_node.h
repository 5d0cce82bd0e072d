#pragma once
// Making autograd nodes of mfsdp's own on any LibTorch: 1.x holds a Node in a shared_ptr,
// 2.x in an intrusive_ptr. The executor's parameter nodes and the traced step's use it.

#include <memory>
#include <type_traits>
#include <utility>

#include <torch/csrc/autograd/function.h>

namespace mfsdp::planner {

using NodePtr = decltype(torch::autograd::Edge::function);

template <typename T, typename... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

}  // namespace mfsdp::planner
