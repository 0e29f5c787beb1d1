// The attention check lives with the conformance suites
// (conformance/attention_check.hpp); the tests use it under these names.
#pragma once

#include "conformance/attention_check.hpp"
#include "core/aligned_buffer.hpp"  // the tests size workspaces with it

namespace llmk::test {

using conformance::AttentionOutcome;
using conformance::AttentionProblem;
using conformance::check_attention_step;
using conformance::half_bits_to_double;

}  // namespace llmk::test
