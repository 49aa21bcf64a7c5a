// Parsing dtype and device names (config keys, command-line overrides).
#include "core/dtype.h"

#include "core/error.h"

namespace echo {

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "fp32") return DType::f32;
  if (name == "f64" || name == "float64" || name == "fp64") return DType::f64;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16" || name == "fp16") return DType::f16;
  if (name == "i8" || name == "int8") return DType::i8;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "u8" || name == "uint8") return DType::u8;
  ECHO_FAIL("unknown dtype '{}': expected one of f32, f64, bf16, f16, i8, i32, u8", name);
}

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  ECHO_FAIL("unknown device '{}': expected cpu or cuda", name);
}

}  // namespace echo
