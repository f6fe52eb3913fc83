// The one launch computation: a generated kernel's launch fields become a plan (launch_plan.h)
// that the in-process runner executes, the measurement worker receives as JSON, and export
// writes as a constant next to a launcher that hands it to the same executing code.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tmap/codegen/emitter.h"
#include "tmap/runtime/launch_plan.h"

namespace tmap {

/// The pointer slots of a GEMM-shaped kernel's plan: operand A, operand B, the output, the
/// workspace, then the epilogue's operands in order.
enum PlanSlot { kSlotA = 0, kSlotB = 1, kSlotOut = 2, kSlotWorkspace = 3, kSlotEpilogue = 4 };

struct LaunchPlan {
  std::vector<std::string> kernels;  ///< The names the steps' `kernel` indices refer to.
  tmap_launch_plan plan{};
};

/// The plan of a generated kernel: its relayout prologue (operands into the workspace), the main
/// kernel (A, B, output, epilogue operands, workspace, then its tensor maps) and its split-K
/// reduction (workspace, output, epilogue operands), each dependent on the one before.
LaunchPlan plan_launch(const KernelSource& k);
/// The plan of a kernel that takes each of `tensors` pointers in order (the reference kernel).
LaunchPlan plan_plain_launch(const KernelSource& k, int tensors);

nlohmann::json to_json(const LaunchPlan& p);
/// Reads a plan, checking every index and count against the fixed arrays and the kernel names
/// (std::runtime_error naming the field otherwise).
LaunchPlan launch_plan_from_json(const nlohmann::json& j);

/// The plan as a C++ aggregate initializer of tmap_launch_plan (export writes it as a constant).
std::string plan_initializer(const tmap_launch_plan& p);

}  // namespace tmap
