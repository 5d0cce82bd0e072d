#pragma once
// The whole text of a JSON file as one document. nlohmann's parser takes a NUL byte for the end
// of the input, so a file with a NUL and anything after it would read as valid; plan files,
// scope files, --training files and checkpoint manifests are all read through here instead.

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace mfsdp::schema {

// Parses all of `text` into `out`. Returns "" on success, else one line saying what is wrong
// and where, e.g. "syntax error while parsing value - invalid literal (line 1 column 4)" or
// "trailing content after the JSON document: a NUL byte at byte offset 812 (line 40 column 2);
// ...". Byte offsets count from 0, lines and columns from 1.
std::string parse_json_text(const std::string& text, nlohmann::json& out);
// As above; arrays and objects nested deeper than 256 levels are refused ("arrays and objects
// nested deeper than 256 levels (line 3 column 9)"), since ordered_json copies its members
// recursively as an object grows and a deeper document would overflow the stack.
std::string parse_json_text(const std::string& text, nlohmann::ordered_json& out);

}  // namespace mfsdp::schema
