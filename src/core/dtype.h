// Element types and memory locations of tensors: names, byte sizes and the C++ element type each
// dtype is read through (Tensor::data<T>() checks it).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace echo {

// bf16 and f16 are stored as raw uint16_t bit patterns (see core/half.h for the conversions).
// f64 serves the CPU backend's float64 gradient tests.
enum class DType : uint8_t { f32, bf16, f16, i8, i32, u8, f64 };

enum class Device : uint8_t { cpu, cuda };

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i8:
      return 1;
    case DType::i32:
      return 4;
    case DType::u8:
      return 1;
    case DType::f64:
      return 8;
  }
  return 0;
}

constexpr bool is_floating(DType dtype) { return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f64;
}

constexpr std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i8:
      return "i8";
    case DType::i32:
      return "i32";
    case DType::u8:
      return "u8";
    case DType::f64:
      return "f64";
  }
  return "?";
}

constexpr std::string_view to_string(Device device) {
  switch (device) {
    case Device::cpu:
      return "cpu";
    case Device::cuda:
      return "cuda";
  }
  return "?";
}

// Inverse of to_string; also accepts the long names ("float32", "bfloat16", "float16", "int8",
// "int32", "uint8"). Throws echo::Error naming the accepted spellings.
DType parse_dtype(std::string_view name);
Device parse_device(std::string_view name);

// The C++ type a dtype's elements are read through: float <-> f32, uint16_t <-> bf16 and f16
// (bit patterns), double <-> f64, int8_t <-> i8, int32_t <-> i32, uint8_t <-> u8.
template <class T>
constexpr bool dtype_holds(DType dtype) {
  if constexpr (std::is_same_v<T, float>)
    return dtype == DType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return dtype == DType::f64;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return dtype == DType::bf16 || dtype == DType::f16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return dtype == DType::i8;
  else if constexpr (std::is_same_v<T, int32_t>)
    return dtype == DType::i32;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return dtype == DType::u8;
  else
    return false;
}

template <class T>
constexpr std::string_view element_type_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_same_v<T, uint16_t>)
    return "uint16_t";
  else if constexpr (std::is_same_v<T, int8_t>)
    return "int8_t";
  else if constexpr (std::is_same_v<T, int32_t>)
    return "int32_t";
  else if constexpr (std::is_same_v<T, uint8_t>)
    return "uint8_t";
  else
    return "(unsupported element type)";
}

}  // namespace echo

// fmt::format("{}", dtype) prints the short name.
template <>
struct fmt::formatter<echo::DType> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(echo::DType d, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(echo::to_string(d), ctx);
  }
};

template <>
struct fmt::formatter<echo::Device> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(echo::Device d, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(echo::to_string(d), ctx);
  }
};
