#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schema/error.h"
#include "schema/plan.h"

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

// A checked-in test input: tests/fixtures/NAME.
inline std::string fixture(const std::string& name) {
  return std::string(MFSDP_SOURCE_DIR) + "/tests/fixtures/" + name;
}

// The plan's unit of that name; throws std::logic_error if there is none.
inline const mfsdp::schema::Unit& unit(const mfsdp::schema::Plan& plan, const std::string& name) {
  for (const auto& u : plan.units) {
    if (u.name == name) return u;
  }
  throw std::logic_error("no unit " + name);
}

// The plan's diagnostics as "code where", in plan order.
inline std::vector<std::string> diagnostic_codes(const mfsdp::schema::Plan& plan) {
  std::vector<std::string> out;
  for (const auto& d : plan.diagnostics) out.push_back(d.code + " " + d.where);
  return out;
}
