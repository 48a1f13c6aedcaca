// In-process ranks: `world` threads in one process, each with its own Communicator over shared memory (CPU tests of
// ZeRO-2 and of rank-identity, docs/design.md §6). Collectives block until every rank has entered them; sums run in
// rank order, so every rank gets bitwise the same result. A rank that throws aborts the others (their pending
// collective throws) and run_local_ranks rethrows the first error. Not here: processes or devices (nccl_group.h).
#pragma once
#include <functional>

#include "distributed/communicator.h"

namespace vdt {

// Runs fn(comm) on `world` threads, one per rank; returns when all are done. `local_world` > 0 emulates nodes of that
// many ranks (Communicator::local_world; 0: one node).
void run_local_ranks(int world, const std::function<void(Communicator&)>& fn, int local_world = 0);

}  // namespace vdt
