// `--set a.b=c` overrides, applied to the YAML tree before typed reading so an override passes
// exactly the checks a file value does; an error in one names the --set instead of a file line.
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <string_view>

#include "core/input_excerpt.h"
#include "core/config/schema.h"
#include "core/config/stages.h"

namespace echo::config {
namespace {

struct Override {
  std::string text;               // as given, for messages
  std::vector<std::string> path;  // "comm.compensator.eta" -> {comm, compensator, eta}
  YAML::Node value;
};

std::string_view trim(std::string_view s) {
  const std::size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

bool is_name(std::string_view s) {
  if (s.empty()) return false;
  for (char ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  return true;
}

std::vector<std::string> split_key(std::string_view key, const std::string& where) {
  std::vector<std::string> path;
  for (std::size_t start = 0;;) {
    const std::size_t dot = key.find('.', start);
    const std::string_view part = key.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (!is_name(part))
      fail_at(where, fmt::format("malformed override key '{}': expected dotted names like comm.compensator.eta",
                                 input_excerpt(key)));
    path.emplace_back(part);
    if (dot == std::string_view::npos) return path;
    start = dot + 1;
  }
}

// The value as YAML: flow collections ("{eta: 0.5}", "[1, 2]") are parsed; anything else is
// one plain scalar, typed later by the key it lands on, as a file value is.
YAML::Node parse_value(std::string_view text, const std::string& where) {
  if (text.empty() || (text.front() != '{' && text.front() != '[')) return YAML::Node(std::string(text));
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    fail_at(where, fmt::format("value '{}' is not valid YAML: {}", input_excerpt(text), yaml_error_text(e)));
  }
}

// "--set key=value" for a message, clipped: a 10 MB value is named by its start and its size.
std::string set_where(const std::string& text) { return "--set " + input_excerpt(text); }

Override parse_override(const std::string& text) {
  const std::string where = set_where(text);
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos) fail_at(where, "malformed override: expected key=value, e.g. --set comm.bits=8");
  const std::string_view view(text);
  return {text, split_key(trim(view.substr(0, eq)), where), parse_value(trim(view.substr(eq + 1)), where)};
}

// The dotted key of another place in `tree` that holds the very node `target` (a YAML anchor
// and its aliases share one node), or "" when none does. `at` is where `tree` sits. Each mapping
// is walked once (`seen`): an alias of an enclosing mapping made the walk endless, and aliases of
// aliases made it exponential.
std::string holder_in(const YAML::Node& tree, const std::string& at, const YAML::Node& target,
                      const std::string& target_key, std::vector<YAML::Node>& seen) {
  if (at != target_key && tree.is(target)) return at;
  if (!tree.IsMap()) return {};
  for (const YAML::Node& done : seen)
    if (done.is(tree)) return {};
  seen.push_back(tree);
  for (const auto& kv : tree) {
    if (!kv.first.IsScalar()) continue;
    const std::string found = holder_in(kv.second, schema::dotted(at, kv.first.Scalar()), target, target_key, seen);
    if (!found.empty()) return found;
  }
  return {};
}

std::string other_holder(const YAML::Node& root, const YAML::Node& target, const std::string& target_key) {
  std::vector<YAML::Node> seen;
  return holder_in(root, "", target, target_key, seen);
}

void apply_override(YAML::Node& root, const Override& item, Origins& origins) {
  // A mapping value merges key by key, as that many --set of its leaves: `--set
  // comm.compensator={eta: 0.5}` changes eta only (it replaced the whole section, resetting the
  // file's other compensator keys to their defaults).
  if (item.value.IsMap()) {
    for (const auto& kv : item.value) {
      Override leaf{item.text, item.path, kv.second};
      leaf.path.push_back(kv.first.IsScalar() ? kv.first.Scalar() : std::string("?"));
      if (!kv.first.IsScalar() || !is_name(leaf.path.back()))
        fail_at(set_where(item.text), "a key of the mapping value is not a name like eta");
      apply_override(root, leaf, origins);
    }
    return;
  }
  // NOTE: YAML::Node copies share the node they refer to, so `node.reset(child)` walks down
  // the tree while `node = child` would overwrite the parent's contents.
  YAML::Node node;
  node.reset(root);
  std::string key;
  for (std::size_t i = 0; i + 1 < item.path.size(); ++i) {
    const std::string& name = item.path[i];
    key = schema::dotted(key, name);
    YAML::Node child = node[name];
    if (!child.IsDefined() || child.IsNull()) {
      node[name] = YAML::Node(YAML::NodeType::Map);
      origins.add_override(key, item.text);
      child.reset(node[name]);
    } else if (!child.IsMap()) {
      fail_at(set_where(item.text), fmt::format("cannot set a key inside '{}': it is not a mapping ({})", key,
                                                origins.where_line(key, child.Mark().line + 1)));
    } else if (const std::string shared = other_holder(root, child, key); !shared.empty()) {
      // A section that is an alias of another: a key set in it would change both.
      fail_at(set_where(item.text),
              fmt::format("'{}' is the same YAML node as '{}' (an anchor and its alias): setting a key in it would "
                          "change both; write the section out in the file",
                          key, shared));
    }
    node.reset(child);
  }
  // NOTE: assigning to an existing value node rebinds the node itself, which a YAML anchor shares
  // with its aliases (`seq_len: *len` set to 64 made `max_position_embeddings: &len` 64 too): the
  // old entry is removed and a new one made.
  const std::string& last = item.path.back();
  if (node[last].IsDefined()) node.remove(last);
  node[last] = item.value;
  origins.add_override(schema::dotted(key, last), item.text);
}

}  // namespace

void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides, Origins& origins) {
  if (overrides.empty()) return;
  check_top_level(root, origins);
  if (root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
  for (const std::string& text : overrides) apply_override(root, parse_override(text), origins);
}

bool tree_sets(const YAML::Node& root, const std::string& dotted_key) {
  YAML::Node node;
  node.reset(root);
  for (const std::string& name : split_key(dotted_key, dotted_key)) {
    if (!node.IsMap()) return false;
    const YAML::Node& parent = node;  // const []: a missing key is not inserted
    const YAML::Node child = parent[name];
    if (!child.IsDefined() || child.IsNull()) return false;
    node.reset(child);
  }
  return true;
}

bool overrides_set(const std::vector<std::string>& overrides, const std::string& dotted_key) {
  YAML::Node root(YAML::NodeType::Map);
  Origins origins("--set");
  apply_overrides(root, overrides, origins);
  return tree_sets(root, dotted_key);
}

}  // namespace echo::config
