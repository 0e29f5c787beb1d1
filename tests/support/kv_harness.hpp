// The KV allocators' shadow model lives with the conformance suites
// (conformance/kv_harness.hpp).
#pragma once

#include "conformance/kv_harness.hpp"
