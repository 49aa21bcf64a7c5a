// for_each_array_element: nlohmann's SAX interface, building one element's value at a time.
#include "apps/prep/json_array_stream.h"

#include <string>
#include <utility>
#include <vector>

namespace echo::prep {
namespace {

using Json = nlohmann::json;

// Builds each element of the top-level array from the parser's events and hands it on when it
// closes. `open_` holds the containers of the element under construction, outermost first; a
// pointer stays valid while its container is open, since only the innermost one grows.
class ElementBuilder final : public nlohmann::json_sax<Json> {
 public:
  explicit ElementBuilder(const std::function<void(Json&&, size_t)>& take) : take_(take) {}

  bool null() override { return add(Json(nullptr)); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t& /*text*/) override { return add(Json(v)); }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t& v) override { return add(Json::binary(std::move(v))); }
  bool start_object(std::size_t /*size*/) override { return open(Json::object()); }
  bool start_array(std::size_t /*size*/) override {
    if (!in_top_array_ && !top_closed_) return in_top_array_ = true;
    return open(Json::array());
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override {
    if (!open_.empty()) return close();
    in_top_array_ = false;
    top_closed_ = true;
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) override {
    // Rethrown as the type nlohmann::json::parse would throw, with its position.
    if (const auto* pe = dynamic_cast<const Json::parse_error*>(&e)) throw *pe;
    if (const auto* range = dynamic_cast<const Json::out_of_range*>(&e)) throw *range;
    throw Json::other_error::create(599, e.what(), nullptr);
  }

  // Whether the input held one top-level array (and nothing else).
  bool was_one_array() const { return top_closed_; }

 private:
  // A value inside an element, or a whole element when it is a scalar.
  bool add(Json&& v) {
    if (!in_top_array_) return not_an_array();
    if (open_.empty()) {
      take_(std::move(v), index_++);
      return true;
    }
    place(std::move(v));
    return true;
  }
  bool open(Json&& container) {
    if (!in_top_array_) return not_an_array();
    if (open_.empty()) {
      element_ = std::move(container);
      open_.push_back(&element_);
    } else {
      open_.push_back(place(std::move(container)));
    }
    return true;
  }
  bool close() {
    open_.pop_back();
    if (open_.empty()) take_(std::move(element_), index_++);
    return true;
  }
  Json* place(Json&& v) {
    Json& into = *open_.back();
    if (into.is_array()) {
      into.push_back(std::move(v));
      return &into.back();
    }
    Json& slot = into[key_];  // a repeated key keeps its last value, as nlohmann::json::parse does
    slot = std::move(v);
    return &slot;
  }
  [[noreturn]] bool not_an_array() {
    throw Json::parse_error::create(101, 0, "the top level is not one JSON array", nullptr);
  }

  const std::function<void(Json&&, size_t)>& take_;
  std::vector<Json*> open_;
  Json element_;
  string_t key_;
  size_t index_ = 0;
  bool in_top_array_ = false, top_closed_ = false;
};

}  // namespace

void for_each_array_element(std::istream& in, const std::function<void(Json&&, size_t)>& take) {
  ElementBuilder builder(take);
  Json::sax_parse(in, &builder);  // strict: nothing but whitespace may follow the array
  if (!builder.was_one_array()) throw Json::parse_error::create(101, 0, "the top level is not one JSON array", nullptr);
}

}  // namespace echo::prep
