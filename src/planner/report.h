// What `switchyard plan` and `switchyard inspect` print: readable tables, and the same facts as JSON.
#pragma once

#include <string>
#include <vector>

#include "planner/planner.h"

namespace sy {

// Columns padded to their widest cell; `left` marks the columns aligned left (the rest align right).
std::string format_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& left);

// The model, weights, machine and step lines that head plan output.
std::string format_target(const PlanTarget& target);
// Every layout of the plan, the invalid ones summarised by rule, and what to do when nothing fits.
std::string format_plan(const PlanTarget& target, const Plan& plan);
// A valid layout: resolved sizes, notes, stages, memory per rank, decode estimates and the rank table.
std::string format_layout(const PlanTarget& target, const LayoutCheck& check);
// A refused layout: one line naming it, then one line per broken rule with its alternatives.
std::string format_issues(const PlanTarget& target, const LayoutCheck& check);
// Notes worth a line even for a valid layout: the completions made and GPUs left unused.
std::vector<std::string> layout_notes(const PlanTarget& target, const LayoutCheck& check);

struct InspectReport {
  ModelDesc shape;
  WeightTable weights;
  std::string weights_source;
};
std::string format_inspect(const InspectReport& report);

std::string plan_json(const PlanTarget& target, const Plan& plan);
std::string layout_json(const PlanTarget& target, const LayoutCheck& check);
std::string inspect_json(const InspectReport& report);

}  // namespace sy
