#pragma once
// Assertions on message text that print the whole text when they fail.

#include <gtest/gtest.h>

#include <string>

namespace mfsdp::executor {

inline ::testing::AssertionResult starts_with(const std::string& text, const std::string& prefix) {
  if (text.rfind(prefix, 0) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not start with '" << prefix << "'";
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

}  // namespace mfsdp::executor
