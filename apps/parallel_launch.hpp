// How a command starts inside a parallel job (mpirun -np N llmk CMD ...
// --set parallel.tensor=...): rank 0 runs the command as usual, its
// executor driving the job; every other rank serves rank 0's steps instead
// (core/parallel_executor.hpp) and exits when rank 0 stops.
#pragma once

#include <optional>

#include "core/config.hpp"

namespace llmk::app {

// nullopt: run the command (rank 0, or a process outside a job). Otherwise
// this rank served the job and the value is its exit code. Throws
// Error(invalid_config) for a launch that does not match the config (more
// ranks started than parallel.tensor x parallel.pipeline, or fewer).
std::optional<int> serve_steps_unless_rank0(const EngineConfig& config);

// For rank 0's command loops: whether the job this process leads failed
// (then the command ends the job: end_failed_job).
bool parallel_job_failed();
// Ends every rank with exit code 1 after logging why.
[[noreturn]] void end_failed_job();

}  // namespace llmk::app
