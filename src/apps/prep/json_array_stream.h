// The elements of a JSON array file, parsed as a stream (docs/design.md, "echo_prep's reading of
// its inputs"): one element's value is held at a time, never the whole file's text and tree.
#pragma once

#include <cstddef>
#include <functional>
#include <istream>
#include <nlohmann/json.hpp>

namespace echo::prep {

// Calls take(element, index) for each element of the JSON array that `in` holds, in order, as soon
// as the element is complete. Throws nlohmann::json::parse_error (its byte names the position) for
// malformed JSON or a top level that is not one array, and nlohmann::json::out_of_range for a
// number past double's range, as nlohmann::json::parse does. NOTE: like nlohmann's parser, it
// takes a NUL byte outside a string for the end of the input: the caller checks that the stream
// was read to its end.
void for_each_array_element(std::istream& in, const std::function<void(nlohmann::json&&, size_t)>& take);

}  // namespace echo::prep
