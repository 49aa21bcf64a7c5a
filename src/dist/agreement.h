// An error agreed over a communicator: every rank passes its own ("" when fine) and every rank
// gets the same answer, so all of them throw it (or none does) instead of one rank throwing while
// the others wait in the next collective. Checkpoint saves and loads, and the trainer's rank-0
// start-up writes, use it.
#pragma once

#include <exception>
#include <string>

#include "dist/communicator.h"

namespace echo::dist {

// The text an agreed error carries: an input or run error's message, or a bug's whole what(),
// so that its "[check ... at file:line]" survives being re-raised on every rank.
std::string error_text(const std::exception& e);

// Every rank of comm calls this with its own error ("" when fine). Returns "" on every rank when
// no rank failed, else (on every rank) the message of the lowest failing rank, with "(reported
// by rank r of P)" when P > 1. Collective over comm: one MPI_Allreduce, plus two MPI_Bcast on failure.
// Watched as a slow collective (dist/collective_watchdog.h: comm.save_timeout_s), since a peer
// may reach it only after a long write or read; `what` names it in the watchdog's message and
// must outlive the call (a string literal).
std::string agree(const Communicator& comm, const std::string& local_error,
                  const char* what = "an agreement over ranks on an error (start-up or a checkpoint)");

}  // namespace echo::dist
