// The stages of load_config, one file each: overrides.cpp edits the YAML tree, reader.cpp turns
// the tree into typed structs (shape and types), checks.cpp checks ranges and combinations.
// Internal to src/core/config.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/origins.h"

namespace echo::config {

// A yaml-cpp parse error in words: its own message, except past its nesting limit, which it
// reports as "bad file".
std::string yaml_error_text(const YAML::Exception& e);

// Throws unless the document is empty or a mapping of sections.
void check_top_level(const YAML::Node& root, const Origins& origins);

// Applies each "a.b=c" to the tree in order, creating missing sections; records them in origins.
void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides, Origins& origins);

// Whether the tree holds a non-null value at `dotted_key` ("data.eos_id"): set, not defaulted.
bool tree_sets(const YAML::Node& root, const std::string& dotted_key);

// Typed values from the tree: unknown or duplicate keys, non-mapping sections and values of
// the wrong type are errors; absent keys keep their defaults. Records each key's line.
Config read_config(const YAML::Node& root, Origins& origins);

// Per-key ranges, then cross-key consistency (world_size 0: unknown, skip the dp checks;
// LayoutChecks::later: skip those that depend on parallel.tp).
void check_config(const Config& config, const Origins& origins, int world_size, LayoutChecks layout);

}  // namespace echo::config
