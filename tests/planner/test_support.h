#pragma once

#include <string>

#include <gtest/gtest.h>

#include "schema/error.h"

// Asserts that `statement` throws mfsdp::Error with `code` and a message containing `text`.
#define EXPECT_MFSDP_ERROR(statement, expected_code, text)                                \
  do {                                                                                    \
    try {                                                                                 \
      statement;                                                                          \
      ADD_FAILURE() << "expected mfsdp::Error containing: " << (text);                    \
    } catch (const mfsdp::Error& e) {                                                     \
      EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(expected_code)) << e.what(); \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();         \
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "multi-line";     \
    }                                                                                     \
  } while (0)
