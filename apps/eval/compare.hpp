// Quality beside speed for `llmk ab`: when configurations differ where the
// numbers can change (linear plugin or its options, KV dtype, attention
// plugin), each is evaluated on one text; the first is the base the others'
// KL divergence and top-1 agreement are measured against.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "apps/eval/session.hpp"
#include "core/config.hpp"

namespace llmk::eval {

// What differs between a and b among the settings above ("" when none), e.g.
// "linear plugin, KV dtype".
std::string quality_difference(const EngineConfig& a, const EngineConfig& b);

struct QualityComparison {
  std::vector<std::string> names;
  std::vector<EvalReport> reports;  // [0] the base, saved; the rest compared with it
};

// Runs `setup` (its save/kl fields are set here) on every config in turn,
// through a temporary file for the base's logits.
QualityComparison compare_quality(const std::vector<EngineConfig>& configs, const std::vector<std::string>& names,
                                  EvalSetup setup);

std::string format_quality(const QualityComparison& q);
nlohmann::json quality_json(const QualityComparison& q);

// A text of about 1,200 words of plain prose for when no --eval-text is given.
const std::string& default_text();

}  // namespace llmk::eval
