// What a benchmark ran on: CPU model, cores, memory, OpenBLAS kernel and MPI library. Every
// benchmark prints it in its header and JSON, because the numbers depend on it (the same
// command gave 357 ms on one 2-core machine and 101 ms on another, with OpenBLAS picking SSE
// kernels on the first and Cooperlake kernels on the second).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace echo::bench {

struct MachineInfo {
  std::string cpu_model;         // /proc/cpuinfo "model name" plus vendor family/model numbers
  std::string cpu_isa;           // widest SIMD the CPU reports: avx512f | avx2 | avx | sse
  int logical_cpus = 0;          // CPUs this process may run on (its affinity mask)
  int online_cpus = 0;           // CPUs online on the host
  double mem_total_gib = 0;      // MemTotal (core/host_memory.h; 0 when unknown)
  double mem_available_gib = 0;  // MemAvailable when the benchmark started (0 when unknown)
  double load_avg_1min = -1;     // other work on the host when the benchmark started
  std::string openblas_core;     // openblas_get_corename(): the kernel family OpenBLAS chose
  std::string openblas_config;   // openblas_get_config(): version and build options
  int openblas_threads = 0;
  std::string mpi_library;       // MPI_Get_library_version(), first line
  std::string hostname;
};

// Reads the machine now. Safe before MPI_Init (MPI_Get_library_version is allowed then).
MachineInfo describe_machine();

// "# machine: ..." lines for a benchmark's header (each starts with `prefix`).
std::string machine_header(const MachineInfo& m, const std::string& prefix = "# ");

nlohmann::json to_json(const MachineInfo& m);

}  // namespace echo::bench
