#pragma once
// The mfsdp::Error that `fn` throws; a test failure (and an empty error) when it throws none.

#include <gtest/gtest.h>

#include "schema/error.h"

namespace mfsdp::testing {

template <typename Fn>
Error error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no mfsdp::Error thrown";
  return Error(ExitCode::kOk, "");
}

}  // namespace mfsdp::testing
