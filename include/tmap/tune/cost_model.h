// The learned cost model: gradient-boosted trees (XGBoost, through its C API) trained online on
// every measured candidate, predicting log2 of the time from candidate_features(). Until it has
// enough samples, predictions come from the analytic model.
#pragma once

#include <memory>
#include <vector>

#include "tmap/tune/features.h"

namespace tmap {

class CostModel {
 public:
  /// Trains once at least `min_samples` measurements exist.
  explicit CostModel(int min_samples = 16, int rounds = 60);
  ~CostModel();
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  void add(const Features& f, double time_us);
  /// Retrains on every sample so far (a few milliseconds for thousands of samples); a no-op
  /// below min_samples.
  void fit();
  bool trained() const;
  int samples() const { return static_cast<int>(labels_.size()); }
  /// Samples added since the last fit() (or since construction).
  int unfitted() const { return samples() - fitted_; }
  /// Estimated log2(time in us) per candidate: lower is faster. Analytic until trained.
  std::vector<double> predict(const std::vector<Features>& f) const;

 private:
  struct Booster;
  int min_samples_, rounds_;
  std::vector<float> rows_;  ///< Row-major samples x kNumFeatures.
  std::vector<float> labels_;
  int fitted_ = 0;
  std::unique_ptr<Booster> booster_;
};

/// Spearman's rank correlation of two equally long series (ties get their mean rank); 0 when
/// shorter than 2 or constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace tmap
