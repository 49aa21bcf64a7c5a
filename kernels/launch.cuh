// ECHO_LAUNCH(grid, block, shared_bytes, stream, kernel)(arguments...): every kernel launch of
// kernels/ goes through it. Under nvcc it is kernel<<<grid, block, shared_bytes, stream>>>(...);
// built for the kernel emulator (ECHO_KERNEL_EMU, tests/emu/cuda_emu.h; docs/design.md §15b) the
// host compiler cannot parse <<<...>>>, and the same launch runs on the CPU instead.
// NOTE: the kernel comes last so that a template kernel's commas (k<T, true>) stay one argument.
#pragma once

#ifdef ECHO_KERNEL_EMU
#define ECHO_LAUNCH(grid, block, shared_bytes, stream, ...)                                                           \
  ::echo::emu::LaunchConfig{#__VA_ARGS__, dim3(grid), dim3(block), static_cast<size_t>(shared_bytes), (stream)}.bind( \
      __VA_ARGS__)
#else
#define ECHO_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif
