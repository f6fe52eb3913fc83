#include "tmap/match/matcher.h"

namespace tmap {

std::string_view message(MatchFailure f) {
  switch (f) {
    case MatchFailure::kNone: return "matches";
    case MatchFailure::kNotAccumulation: return "the compute does not accumulate ('+='), but the intrinsic does";
    case MatchFailure::kInputCountMismatch: return "the compute is not a product of exactly two inputs";
    case MatchFailure::kInputDTypeMismatch: return "input dtypes cannot feed the intrinsic's operands";
    case MatchFailure::kAccumulatorDTypeMismatch: return "the accumulation dtype is not the intrinsic's accumulator dtype";
    case MatchFailure::kNoMappableIterator: return "no iterator can play any axis of the intrinsic";
  }
  return "unknown failure";
}

std::string_view stage(MatchFailure f) {
  switch (f) {
    case MatchFailure::kNone: return "none";
    case MatchFailure::kNotAccumulation:
    case MatchFailure::kInputCountMismatch: return "dag";
    case MatchFailure::kInputDTypeMismatch:
    case MatchFailure::kAccumulatorDTypeMismatch: return "expression";
    case MatchFailure::kNoMappableIterator: return "index";
  }
  return "unknown";
}

std::string reason_text(MatchFailure f, const std::string& detail) {
  std::string out(message(f));
  if (!detail.empty()) out += " (" + detail + ")";
  return out;
}

DagMatch match_dag(const Compute& c, const HwAbstraction& hw) {
  DagMatch m;
  if (c.inputs.size() != 2) {
    m.failure = MatchFailure::kInputCountMismatch;
    m.detail = "'" + c.name + "' multiplies " + std::to_string(c.inputs.size()) + " input(s); '" + hw.name +
               "' loads 2 operands into one " + hw.compute_name;
  } else if (c.update != UpdateKind::kAccumulate) {
    m.failure = MatchFailure::kNotAccumulation;
    m.detail = "'" + c.name + "' assigns with '='; '" + hw.name + "' computes " + hw.expression;
  }
  return m;
}

ExprMatch match_expression(const Compute& c, const HwAbstraction& hw) {
  ExprMatch m;
  const Tensor& out = c.tensor_of(c.output);
  if (c.accumulate != hw.d_dtype) {
    m.failure = MatchFailure::kAccumulatorDTypeMismatch;
    m.detail = "output " + out.name + " accumulates in " + std::string(dtype_name(c.accumulate)) + ", accumulator " +
               hw.d + " is " + std::string(dtype_name(hw.d_dtype));
    // A narrow output without "accumulate" sums in its own dtype: name the fix.
    if (c.accumulate == out.dtype && dtype_is_float(out.dtype) && dtype_is_float(hw.d_dtype) &&
        dtype_bits(out.dtype) < dtype_bits(hw.d_dtype))
      m.detail += "; to sum in " + std::string(dtype_name(hw.d_dtype)) + " and store " +
                  std::string(dtype_name(out.dtype)) + ", give \"accumulate\": \"" +
                  std::string(dtype_name(hw.d_dtype)) + "\" in the compute";
    return m;
  }
  const Tensor& x = c.tensor_of(c.inputs[0]);
  const Tensor& y = c.tensor_of(c.inputs[1]);
  // The written order first; the swapped order only when the written one does not fit.
  for (auto [a, b] : {std::pair{0, 1}, std::pair{1, 0}}) {
    const Tensor& ta = c.tensor_of(c.inputs[a]);
    const Tensor& tb = c.tensor_of(c.inputs[b]);
    if (dtype_feeds_operand(ta.dtype, hw.a_dtype) && dtype_feeds_operand(tb.dtype, hw.b_dtype)) {
      m.a_input = a;
      m.b_input = b;
      return m;
    }
  }
  m.failure = MatchFailure::kInputDTypeMismatch;
  m.detail = "inputs " + x.name + " (" + std::string(dtype_name(x.dtype)) + ") and " + y.name + " (" +
             std::string(dtype_name(y.dtype)) + "); operands " + hw.a + " (" + std::string(dtype_name(hw.a_dtype)) +
             ") and " + hw.b + " (" + std::string(dtype_name(hw.b_dtype)) + ")";
  return m;
}

ExprMatch swapped_roles(const Compute& c, const HwAbstraction& hw, const ExprMatch& roles) {
  TMAP_CHECK(roles.ok(), "swapped_roles needs a successful expression match");
  ExprMatch m;
  const Tensor& ta = c.tensor_of(c.inputs[roles.b_input]);
  const Tensor& tb = c.tensor_of(c.inputs[roles.a_input]);
  if (!dtype_feeds_operand(ta.dtype, hw.a_dtype) || !dtype_feeds_operand(tb.dtype, hw.b_dtype)) {
    m.failure = MatchFailure::kInputDTypeMismatch;
    m.detail = "swapped, " + ta.name + " (" + std::string(dtype_name(ta.dtype)) + ") would feed " + hw.a + " (" +
               std::string(dtype_name(hw.a_dtype)) + ") and " + tb.name + " (" + std::string(dtype_name(tb.dtype)) +
               ") " + hw.b + " (" + std::string(dtype_name(hw.b_dtype)) + ")";
    return m;
  }
  m.a_input = roles.b_input;
  m.b_input = roles.a_input;
  return m;
}

bool shapes_symmetric(const HwAbstraction& hw) {
  for (const auto& s : hw.shapes) {
    bool found = false;
    for (const auto& t : hw.shapes)
      found = found || (t.extent[0] == s.extent[1] && t.extent[1] == s.extent[0] && t.extent[2] == s.extent[2]);
    if (!found) return false;
  }
  return true;
}

IndexMatch match_indices(const Compute& c, const ExprMatch& roles) {
  TMAP_CHECK(roles.ok(), "match_indices needs a successful expression match");
  IndexMatch m;
  const Access& a = c.inputs[roles.a_input];
  const Access& b = c.inputs[roles.b_input];
  for (int it = 0; it < static_cast<int>(c.iters.size()); ++it) {
    bool in_a = a.uses(it), in_b = b.uses(it), in_d = c.output.uses(it);
    if (in_a && in_d && !in_b) m.candidates[0].push_back(it);
    else if (in_b && in_d && !in_a) m.candidates[1].push_back(it);
    else if (in_a && in_b && !in_d) m.candidates[2].push_back(it);
    else if (in_a && in_b && in_d) m.batch.push_back(it);
    else m.outer.push_back(it);
  }
  if (m.candidates[0].empty() && m.candidates[1].empty() && m.candidates[2].empty()) {
    m.failure = MatchFailure::kNoMappableIterator;
    m.detail = "every iterator of '" + c.name + "' indexes all three tensors or only one";
  }
  return m;
}

}  // namespace tmap
