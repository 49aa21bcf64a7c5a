// echo_depth: the accumulated communication error of a synthetic residual stream of N all-reduce
// sites, through the real Echo QAR over MPI, against the Echo paper's bounds (Theorem 1 and
// Eqn. (21) of "Echo", arXiv:2610.14277; docs/design.md §8, §15).
//   mpirun -np 4 echo_depth [--sites 8,32,128,256,512] [--eta 0,0.75,1] [--coeffs 0.7,0.3,0.35 ...]
//                           [--csv depth.csv] [--json depth.json]
//
// At site k every rank contributes x_{k,r} (coherent case: the same vector at every site;
// independent case: a fresh one per site) to one EchoAllReduce forward pass. With ŷ_k the
// all-reduce output and x' = x + c the compensated contribution, as in
// tests/comm/compensator_mpi_test.cpp:
//   ρ_k = ŷ_k − Σ_r x_{k,r}        S_t = Σ_{k≤t} ρ_k        δ_k = ŷ_k − Σ_r x'_{k,r}
//   q   = max_{k≤N} ‖δ_k‖          reported: max_{t≤N} ‖S_t‖ / q
// The sums over ranks are formed in double from every rank's actual fp32 x and x' (one double
// all-reduce per site), so nothing is modelled: x' comes from the compensator's own state through
// the same compensate() the implementation calls.
//
// Bounds: μ_w = Σ_r r·w_r = a·β1/(1−β1) + (1−a)·β2/(1−β2) (the mean return age of Theorem 1; 1.095
// for the defaults); η = 1: (1 + μ_w); η < 1: (1 − η)·N + η·(1 + μ_w) (Eqn. (21); η = 0 gives N).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "apps/output_option.h"
#include "apps/parse_command_line.h"
#include "comm/echo/echo_all_reduce.h"
#include "core/atomic_file.h"
#include "core/config/config.h"
#include "core/config/schema.h"
#include "core/error.h"
#include "core/same_file.h"
#include "dist/communicator.h"
#include "dist/guarded_main.h"

namespace echo {
namespace {

struct Coeffs {
  double beta1 = 0.7, beta2 = 0.3, a = 0.35;  // the config defaults (comm.compensator.*)
};

struct Row {
  std::string kind;  // "coherent" or "independent"
  double eta = 0;
  Coeffs coeffs;
  double mu_w = 0;
  int sites = 0;
  double max_s = 0, q = 0, ratio = 0, bound = 0;
  bool within = true;
};

// The contributions of tests/support/test_data.h (random_normal: Normal(0.2, 1) from a mt19937_64
// keyed by (seed, rank)), so --seed 0 feeds exactly the compensator test's streams and reproduces
// its numbers.
std::vector<float> contribution(size_t n, uint64_t seed, uint64_t rank) {
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + rank * 0xBF58476D1CE4E5B9ull + 1);
  std::normal_distribution<float> dist(0.2f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// One forward pass of max(sites) sites; a row per requested N (the first N sites of the stream
// are the same whatever N, so prefixes of one pass give every N).
// Removes the later copies of values that occur more than once, keeping the given order.
template <class T>
void drop_repeats(std::vector<T>& values) {
  std::vector<T> kept;
  for (const T& v : values)
    if (std::find(kept.begin(), kept.end(), v) == kept.end()) kept.push_back(v);
  values = std::move(kept);
}

std::vector<Row> run_stream(const dist::Communicator& comm, const comm::EchoOptions& base, bool coherent, double eta,
                            const Coeffs& k, const std::vector<int>& sites, size_t n, uint64_t seed) {
  comm::EchoOptions opt = base;
  opt.coeffs = {static_cast<float>(eta), static_cast<float>(k.a), static_cast<float>(k.beta1),
                static_cast<float>(k.beta2)};
  comm::EchoAllReduce ar(comm, opt);
  ar.begin_pass(comm::Direction::forward);
  const comm::CompensatorCoeffs& kc = ar.compensator(comm::Direction::forward).coeffs();
  // From the coefficients as given (the compensator runs on their fp32 roundings, 1e-7 away).
  const double mu_w = k.a * k.beta1 / (1.0 - k.beta1) + (1.0 - k.a) * k.beta2 / (1.0 - k.beta2);
  const int max_sites = *std::max_element(sites.begin(), sites.end());
  const uint64_t offset = seed * 1000003ull;
  const std::vector<float> fixed = coherent ? contribution(n, 99 + offset, comm.rank()) : std::vector<float>{};

  std::vector<double> local(2 * n), total(2 * n), partial(n, 0.0), rho(n), delta(n);
  std::vector<float> x_comp(n);
  double max_s = 0, q = 0;
  std::vector<Row> rows;
  for (int site = 0; site < max_sites; ++site) {
    const std::vector<float> x = coherent ? fixed : contribution(n, 1000 + site + offset, comm.rank());
    // x' as the all-reduce will form it: c = 0 at the first site of a pass (the state is sized
    // then), afterwards from the state the previous site left.
    const auto m1 = ar.compensator(comm::Direction::forward).m1();
    const auto m2 = ar.compensator(comm::Direction::forward).m2();
    for (size_t i = 0; i < n; ++i) x_comp[i] = site == 0 ? x[i] : comm::compensate(x[i], m1[i], m2[i], kc);
    std::vector<float> y = x;
    ar.all_reduce(y, {site, comm::Direction::forward});
    for (size_t i = 0; i < n; ++i) {
      local[i] = x[i];
      local[n + i] = x_comp[i];
    }
    MPI_Allreduce(local.data(), total.data(), static_cast<int>(2 * n), MPI_DOUBLE, MPI_SUM, comm.get());
    for (size_t i = 0; i < n; ++i) {
      partial[i] += static_cast<double>(y[i]) - total[i];
      delta[i] = static_cast<double>(y[i]) - total[n + i];
    }
    max_s = std::max(max_s, norm(partial));
    q = std::max(q, norm(delta));
    if (std::find(sites.begin(), sites.end(), site + 1) == sites.end()) continue;
    Row r;
    r.kind = coherent ? "coherent" : "independent";
    r.eta = eta;
    r.coeffs = k;
    r.mu_w = mu_w;
    r.sites = site + 1;
    r.max_s = max_s;
    r.q = q;
    r.ratio = q > 0 ? max_s / q : 0.0;
    // Eqn. (21); at η = 1 it is Theorem 1's (1 + μ_w).
    r.bound = (1.0 - eta) * (site + 1) + eta * (1.0 + mu_w);
    // NOTE: a relative slack of 1e-9 for η = 0 coherent, where the ratio is N up to rounding.
    r.within = r.ratio <= r.bound * (1 + 1e-9);
    rows.push_back(r);
  }
  return rows;
}

std::string fmt_num(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A Markdown table: one row per (case, η, coefficients), one column per N, cells "ratio (bound)".
std::string markdown(const std::vector<Row>& rows, const std::vector<int>& sites) {
  std::ostringstream out;
  out << "| case | η | β1 | β2 | a | μ_w |";
  for (int n : sites) out << " N = " << n << " |";
  out << "\n|---|---|---|---|---|---|";
  for (size_t i = 0; i < sites.size(); ++i) out << "---|";
  out << "\n";
  for (size_t i = 0; i < rows.size(); i += sites.size()) {
    const Row& r = rows[i];
    out << "| " << r.kind << " | " << fmt_num(r.eta, 2) << " | " << fmt_num(r.coeffs.beta1, 2) << " | "
        << fmt_num(r.coeffs.beta2, 2) << " | " << fmt_num(r.coeffs.a, 2) << " | " << fmt_num(r.mu_w) << " |";
    for (size_t j = 0; j < sites.size(); ++j) {
      const Row& c = rows[i + j];
      out << " " << fmt_num(c.ratio) << " (≤ " << fmt_num(c.bound) << ")" << (c.within ? "" : " **over**") << " |";
    }
    out << "\n";
  }
  return out.str();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) parts.push_back(cur);
  return parts;
}

// "0.7,0.3,0.35" -> (β1, β2, a), validated as the config validates comm.compensator.
Coeffs parse_coeffs(const std::string& text) {
  const auto parts = split(text, ',');
  ECHO_INPUT_CHECK(parts.size() == 3, "--coeffs '{}': expected three numbers BETA1,BETA2,A", text);
  double v[3];
  for (int i = 0; i < 3; ++i) {
    size_t used = 0;
    try {
      v[i] = std::stod(parts[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ECHO_INPUT_CHECK(used == parts[i].size() && used > 0, "--coeffs '{}': '{}' is not a number", text, parts[i]);
  }
  for (int i = 0; i < 2; ++i) {
    const std::string problem = config::schema::fp32_decay().number(v[i]);
    ECHO_INPUT_CHECK(problem.empty(), "--coeffs '{}': β{} = {} {}", text, i + 1, parts[i], problem);
  }
  ECHO_INPUT_CHECK(v[2] >= 0 && v[2] <= 1, "--coeffs '{}': a must lie in [0, 1]", text);
  return {v[0], v[1], v[2]};
}

int depth_main(int argc, char** argv) {
  std::vector<int> sites{8, 32, 128, 256, 512};
  std::vector<double> etas{0.0, 0.75, 1.0};
  std::vector<std::string> coeff_text;
  std::vector<std::string> cases{"coherent", "independent"};
  int64_t elements = 4096;
  int bits = 4, group_size = 128;
  std::string quantizer = "asym_zero_aware", json_path, csv_path;
  uint64_t seed = 0;
  CLI::App app{
      "echo_depth: accumulated error of an N-site residual stream through Echo's QAR vs Theorem 1 / Eqn. (21)"};
  app.add_option("--sites", sites, "stream depths N to report (comma-separated; at most 512)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--eta", etas, "compensator gains η (comma-separated, each in [0, 1])")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--coeffs", coeff_text, "BETA1,BETA2,A of the compensator (repeatable; default 0.7,0.3,0.35)");
  app.add_option("--cases", cases, "coherent (same contribution every site), independent (fresh per site)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--elements", elements, "values per all-reduce")->capture_default_str();
  app.add_option("--bits", bits, "code width, 4 or 8")->capture_default_str();
  app.add_option("--group-size", group_size, "values per quantization group (power of two)")->capture_default_str();
  app.add_option("--quantizer", quantizer, "symmetric, asym_naive, asym_zero_aware")->capture_default_str();
  app.add_option("--seed", seed, "input seed; 0 feeds the streams of tests/comm/compensator_mpi_test")
      ->capture_default_str();
  app.add_option("--json", json_path, "write the rows as JSON (rank 0)")->check(echo::apps::writable_output());
  app.add_option("--csv", csv_path, "write the rows as CSV, one per (case, η, coefficients, N) (rank 0)")
      ->check(echo::apps::writable_output());
  const auto comm = dist::Communicator::borrow(MPI_COMM_WORLD);
  try {
    echo::apps::parse_naming_unknown_options(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return comm.rank() == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
  }
  ECHO_INPUT_CHECK(json_path.empty() || csv_path.empty() || !same_file(json_path, csv_path),
                   "--json {} and --csv {} name one file: each would replace the other", json_path, csv_path);
  ECHO_INPUT_CHECK(!sites.empty(), "--sites is empty");
  for (int n : sites) ECHO_INPUT_CHECK(n >= 1 && n <= 512, "--sites {}: each N must lie in [1, 512]", n);
  std::sort(sites.begin(), sites.end());
  sites.erase(std::unique(sites.begin(), sites.end()), sites.end());
  ECHO_INPUT_CHECK(!etas.empty(), "--eta is empty");
  for (double e : etas) ECHO_INPUT_CHECK(e >= 0 && e <= 1, "--eta {}: η must lie in [0, 1]", e);
  for (const auto& c : cases)
    ECHO_INPUT_CHECK(c == "coherent" || c == "independent", "--cases '{}': expected coherent or independent", c);
  // A value given twice is one row, as --sites is one column: "--eta 1,1" printed two identical
  // rows and counted each in the summary.
  drop_repeats(etas);
  drop_repeats(cases);
  ECHO_INPUT_CHECK(elements >= 1 && elements <= (int64_t{1} << 24), "--elements {}: must lie in [1, 16777216]",
                   elements);
  ECHO_INPUT_CHECK(bits == 4 || bits == 8, "--bits {}: must be 4 or 8", bits);
  ECHO_INPUT_CHECK(group_size >= 2 && group_size <= 4096 && (group_size & (group_size - 1)) == 0,
                   "--group-size {}: must be a power of two in [2, 4096]", group_size);
  const auto policy = config::try_parse<QuantPolicy>(quantizer);
  ECHO_INPUT_CHECK(policy.has_value(), "--quantizer '{}': expected one of {}", quantizer,
                   config::enum_choices<QuantPolicy>());
  std::vector<Coeffs> coeffs;
  for (const auto& t : coeff_text) coeffs.push_back(parse_coeffs(t));
  if (coeffs.empty()) coeffs.push_back(Coeffs{});

  comm::EchoOptions base;
  base.quant = {*policy, bits, group_size};
  base.compensate = true;  // η = 0 is the uncompensated per-call quantization (c = 0 exactly)
  base.telemetry = false;
  const size_t n = static_cast<size_t>(elements);
  std::vector<Row> rows;
  for (const auto& c : cases)
    for (const Coeffs& k : coeffs)
      for (double eta : etas) {
        auto r = run_stream(comm, base, c == "coherent", eta, k, sites, n, seed);
        rows.insert(rows.end(), r.begin(), r.end());
      }
  if (comm.rank() != 0) return 0;

  std::printf(
      "echo_depth: P = %d ranks, %d-bit %s, g = %d, %zu values per all-reduce; max_t ‖S_t‖ / q with "
      "q = max_k ‖δ_k‖ (bound: Theorem 1 at η = 1, Eqn. (21) below)\n\n%s",
      comm.size(), bits, quantizer.c_str(), group_size, n, markdown(rows, sites).c_str());
  int over = 0;
  for (const Row& r : rows) over += r.within ? 0 : 1;
  std::printf("\n%d of %zu values above their bound\n", over, rows.size());

  if (!csv_path.empty()) {
    // Through write_file_atomic like --json: a full disk is an error, not an empty file with exit 0.
    std::ostringstream f;
    f.precision(12);
    f << "case,eta,beta1,beta2,a,mu_w,P,bits,group_size,elements,sites,max_s,q,max_s_over_q,bound,within_bound\n";
    for (const Row& r : rows)
      f << r.kind << ',' << r.eta << ',' << r.coeffs.beta1 << ',' << r.coeffs.beta2 << ',' << r.coeffs.a << ','
        << r.mu_w << ',' << comm.size() << ',' << bits << ',' << group_size << ',' << n << ',' << r.sites << ','
        << r.max_s << ',' << r.q << ',' << r.ratio << ',' << r.bound << ',' << (r.within ? 1 : 0) << '\n';
    write_file_atomic(csv_path, f.str(), "--csv " + csv_path);
  }
  if (!json_path.empty()) {
    nlohmann::ordered_json j = {{"P", comm.size()},       {"bits", bits},  {"group_size", group_size},
                                {"quantizer", quantizer}, {"elements", n}, {"seed", seed}};
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const Row& r : rows)
      list.push_back({{"case", r.kind},
                      {"eta", r.eta},
                      {"beta1", r.coeffs.beta1},
                      {"beta2", r.coeffs.beta2},
                      {"a", r.coeffs.a},
                      {"mu_w", r.mu_w},
                      {"sites", r.sites},
                      {"max_s", r.max_s},
                      {"q", r.q},
                      {"max_s_over_q", r.ratio},
                      {"bound", r.bound},
                      {"within_bound", r.within}});
    j["rows"] = list;
    write_file_atomic(json_path, j.dump(2) + "\n", "--json " + json_path);
  }
  return 0;
}

}  // namespace
}  // namespace echo

int main(int argc, char** argv) { return echo::dist::guarded_main(argc, argv, echo::depth_main); }
