// Machine description for benchmark headers and JSON (see machine.h).
#include "apps/bench/machine.h"

#include <cblas.h>
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/host_memory.h"

namespace echo::bench {
namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The value of the first "key : value" line of a /proc file whose key is `key`.
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return {};
}

double gib(std::optional<size_t> bytes) { return bytes ? static_cast<double>(*bytes) / (1 << 30) : 0.0; }

std::string widest_isa(const std::string& flags) {
  std::istringstream in(flags);
  bool avx512 = false, avx2 = false, avx = false;
  for (std::string f; in >> f;) {
    avx512 |= f == "avx512f";
    avx2 |= f == "avx2";
    avx |= f == "avx";
  }
  return avx512 ? "avx512f" : avx2 ? "avx2" : avx ? "avx" : flags.empty() ? "unknown" : "sse";
}

}  // namespace

MachineInfo describe_machine() {
  MachineInfo m;
  std::string model = proc_field("/proc/cpuinfo", "model name");
  const std::string family = proc_field("/proc/cpuinfo", "cpu family"), number = proc_field("/proc/cpuinfo", "model");
  if (model.empty()) model = "unknown CPU";
  // NOTE: virtual machines often report a bare "AMD EPYC"; family/model tell the generations apart.
  if (!family.empty()) model += fmt::format(" (family {}, model {})", family, number);
  m.cpu_model = model;
  m.cpu_isa = widest_isa(proc_field("/proc/cpuinfo", "flags"));
  cpu_set_t set;
  CPU_ZERO(&set);
  m.logical_cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  m.online_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m.mem_total_gib = gib(host_memory_total_bytes());
  m.mem_available_gib = gib(host_memory_available_bytes());
  double load[1];
  if (getloadavg(load, 1) == 1) m.load_avg_1min = load[0];
  m.openblas_core = trim(openblas_get_corename());
  m.openblas_config = trim(openblas_get_config());
  m.openblas_threads = openblas_get_num_threads();
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  const std::string mpi(version);  // NOTE: Open MPI's len counts the terminating NUL; stop at it

  m.mpi_library = trim(mpi.substr(0, mpi.find('\n')));
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) m.hostname = host;
  return m;
}

std::string machine_header(const MachineInfo& m, const std::string& prefix) {
  std::string out = fmt::format("{}machine: {} [{}], {} logical CPUs usable ({} online), {:.1f} GiB RAM ({:.1f} available), "
                                "load avg {:.2f}, host {}\n",
                                prefix, m.cpu_model, m.cpu_isa, m.logical_cpus, m.online_cpus, m.mem_total_gib,
                                m.mem_available_gib, m.load_avg_1min, m.hostname);
  out += fmt::format("{}OpenBLAS core {} ({} thread{}): {}\n", prefix, m.openblas_core, m.openblas_threads,
                     m.openblas_threads == 1 ? "" : "s", m.openblas_config);
  out += fmt::format("{}MPI: {}\n", prefix, m.mpi_library);
  return out;
}

nlohmann::json to_json(const MachineInfo& m) {
  return {{"cpu_model", m.cpu_model},
          {"cpu_isa", m.cpu_isa},
          {"logical_cpus", m.logical_cpus},
          {"online_cpus", m.online_cpus},
          {"mem_total_gib", m.mem_total_gib},
          {"mem_available_gib", m.mem_available_gib},
          {"load_avg_1min", m.load_avg_1min},
          {"openblas_core", m.openblas_core},
          {"openblas_config", m.openblas_config},
          {"openblas_threads", m.openblas_threads},
          {"mpi_library", m.mpi_library},
          {"hostname", m.hostname}};
}

}  // namespace echo::bench
