// ECHO_SIMD_CLONES: compiles a hot host loop for AVX-512, AVX2 and baseline x86-64 and picks one
// at load time (GCC function multiversioning), since the build targets the baseline ISA. Every op
// in echo's arithmetic rounds once (core/hd.h, -ffp-contract=off), so all clones give the same bits.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define ECHO_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ECHO_SIMD_CLONES
#endif
