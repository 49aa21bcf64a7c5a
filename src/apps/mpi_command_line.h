// Parsing a program's command line under mpirun: every rank parses it, only rank 0 prints the
// help or the parse error (P copies would interleave), and every rank exits with the same status.
#pragma once

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <optional>

#include "apps/parse_command_line.h"

namespace echo::apps {

// nullopt when the command line parsed and the program goes on; else the status to exit with
// (0 after --help, non-zero after an error).
inline std::optional<int> parse_on_every_rank(CLI::App& app, int argc, char** argv) {
  try {
    parse_naming_unknown_options(app, argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank == 0 ? app.exit(e) : e.get_exit_code();  // app.exit prints and returns the same code
  }
}

}  // namespace echo::apps
