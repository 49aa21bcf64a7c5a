# System-package dependencies (Debian names in third_party/README.md). Nothing vendored.
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Threads REQUIRED)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_package(PkgConfig REQUIRED)
# 10.40: binary properties such as \p{White_Space} (tokenizer/regex.h).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8>=10.40)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
# XXH3-64 checksums of training checkpoints (train/checkpoint/checksums.h).
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# SHA-256 of the tokenizer.json a dataset was prepared with (core/sha256.h), as sha256sum prints it.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(dnnl REQUIRED)
