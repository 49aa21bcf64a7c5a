// How a checkpoint save or load raises an error its ranks agreed on (dist/agreement.h).
#pragma once

#include <string>

#include "core/error.h"

namespace echo::train::ckpt {

// Thrown as what it is about: a load's is what the user gave (a checkpoint), an InputError; a
// save's is the file system refusing a write (a full disk, a permission), a RunError. Both read
// as plain messages, without a source location.
enum class Failure { load, save };

inline void throw_if(const std::string& error, Failure failure) {
  if (error.empty()) return;
  if (failure == Failure::load) ECHO_INPUT_FAIL("{}", error);
  ECHO_RUN_FAIL("{}", error);
}

}  // namespace echo::train::ckpt
