// ECHO_SIMD_CLONES: compiles a hot host loop for AVX-512, AVX2 and baseline x86-64 and picks one
// at load time (GCC function multiversioning), since the build targets the baseline ISA. Every op
// in echo's arithmetic rounds once (core/hd.h, -ffp-contract=off), so all clones give the same bits.
#pragma once

//
// ECHO_SIMD_VERSIONS: set where the same three targets can be written as separate function
// versions instead (GCC C++ function multiversioning: one definition per ECHO_TARGET_* attribute,
// same name and signature, dispatched at load time like the clones), for code whose body differs
// per target, e.g. in the width of its explicit vectors.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define ECHO_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define ECHO_SIMD_VERSIONS 1
#define ECHO_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define ECHO_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#define ECHO_TARGET_DEFAULT __attribute__((target("default")))
#else
#define ECHO_SIMD_CLONES
#endif
