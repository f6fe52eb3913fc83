// The learned cost model: gradient-boosted trees (XGBoost, through its C API) trained online on
// every measured candidate, predicting log2 of the time from candidate_features(). Until it has
// enough samples, predictions come from the analytic model.
#pragma once

#include <future>
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
  /// below min_samples. Waits for a background fit first.
  void fit();
  /// Like fit(), but once a model exists the retraining runs on a thread of its own and the
  /// current model keeps predicting until the new one is done (it takes over at the next
  /// predict(), trained() or fit call). Returns false, starting nothing, while an earlier
  /// background fit is still running. The first fit is synchronous, so that the model is there
  /// as soon as it can be.
  bool fit_in_background();
  /// Whether a background fit is running.
  bool fitting() const;
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
  /// Only the owner's thread touches booster_; a background fit builds a Booster of its own
  /// from copies of the samples and hands it over through pending_.
  mutable std::unique_ptr<Booster> booster_;
  mutable std::future<std::unique_ptr<Booster>> pending_;
  /// Takes over a finished background fit's model.
  void adopt() const;
  /// Trains a model on these samples (any thread).
  std::unique_ptr<Booster> train(const std::vector<float>& rows, const std::vector<float>& labels) const;
};

/// Spearman's rank correlation of two equally long series (ties get their mean rank); 0 when
/// shorter than 2 or constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace tmap
