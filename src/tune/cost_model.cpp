#include "tmap/tune/cost_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include <xgboost/c_api.h>

namespace tmap {
namespace {

void xgb_check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string("XGBoost ") + what + ": " + XGBGetLastError());
}

/// A DMatrix owned for the length of a scope.
struct Matrix {
  DMatrixHandle h = nullptr;
  Matrix(const float* data, std::size_t rows) {
    // XGBoost refuses infinite values: a feature that overflowed is read as missing instead.
    std::vector<float> finite(rows * kNumFeatures);
    for (std::size_t i = 0; i < finite.size(); ++i) finite[i] = std::isinf(data[i]) ? NAN : data[i];
    xgb_check(XGDMatrixCreateFromMat(finite.data(), rows, kNumFeatures, NAN, &h), "XGDMatrixCreateFromMat");
  }
  ~Matrix() {
    if (h) XGDMatrixFree(h);
  }
};

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (std::size_t k = i; k <= j; ++k) r[order[k]] = (i + j) / 2.0;
    i = j + 1;
  }
  return r;
}

}  // namespace

struct CostModel::Booster {
  BoosterHandle h = nullptr;
  ~Booster() {
    if (h) XGBoosterFree(h);
  }
};

CostModel::CostModel(int min_samples, int rounds) : min_samples_(min_samples), rounds_(rounds) {}
CostModel::~CostModel() {
  if (pending_.valid()) pending_.wait();
}

void CostModel::add(const Features& f, double time_us) {
  rows_.insert(rows_.end(), f.begin(), f.end());
  labels_.push_back(static_cast<float>(std::log2(std::max(time_us, 1e-3))));
}

bool CostModel::trained() const {
  adopt();
  return booster_ != nullptr;
}

bool CostModel::fitting() const {
  return pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

void CostModel::adopt() const {
  if (!pending_.valid() || pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  // A background fit that threw (XGBoost failing) leaves the current model in place and
  // reports on the next synchronous fit instead, which trains on the same samples.
  try {
    booster_ = pending_.get();
  } catch (const std::exception&) {
  }
}

std::unique_ptr<CostModel::Booster> CostModel::train(const std::vector<float>& rows,
                                                      const std::vector<float>& labels) const {
  Matrix train(rows.data(), labels.size());
  xgb_check(XGDMatrixSetFloatInfo(train.h, "label", labels.data(), labels.size()), "set labels");
  auto b = std::make_unique<Booster>();
  xgb_check(XGBoosterCreate(&train.h, 1, &b->h), "XGBoosterCreate");
  const std::pair<const char*, const char*> params[] = {
      {"objective", "reg:squarederror"}, {"max_depth", "6"}, {"eta", "0.2"}, {"subsample", "0.9"},
      {"min_child_weight", "1"},         {"nthread", "2"},   {"verbosity", "0"}, {"seed", "7"}};
  for (const auto& [k, v] : params) xgb_check(XGBoosterSetParam(b->h, k, v), "XGBoosterSetParam");
  for (int i = 0; i < rounds_; ++i) xgb_check(XGBoosterUpdateOneIter(b->h, i, train.h), "XGBoosterUpdateOneIter");
  return b;
}

void CostModel::fit() {
  if (pending_.valid()) pending_.wait();
  adopt();
  if (samples() < min_samples_) return;
  fitted_ = samples();
  booster_ = train(rows_, labels_);
}

bool CostModel::fit_in_background() {
  adopt();
  if (pending_.valid()) return false;
  if (!booster_) {
    fit();
    return true;
  }
  fitted_ = samples();
  pending_ = std::async(std::launch::async, [this, rows = rows_, labels = labels_] { return train(rows, labels); });
  return true;
}

std::vector<double> CostModel::predict(const std::vector<Features>& f) const {
  adopt();
  std::vector<double> out(f.size());
  if (f.empty()) return out;
  if (!booster_) {
    for (std::size_t i = 0; i < f.size(); ++i) out[i] = f[i][kAnalyticFeature];  // log2 of the analytic estimate
    return out;
  }
  std::vector<float> rows;
  rows.reserve(f.size() * kNumFeatures);
  for (const auto& x : f) rows.insert(rows.end(), x.begin(), x.end());
  Matrix m(rows.data(), f.size());
  bst_ulong len = 0;
  const float* result = nullptr;
  xgb_check(XGBoosterPredict(booster_->h, m.h, 0, 0, 0, &len, &result), "XGBoosterPredict");
  for (std::size_t i = 0; i < f.size() && i < len; ++i) out[i] = result[i];
  return out;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return 0;
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size()), mean = (n - 1) / 2;
  double cov = 0, va = 0, vb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  return va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : 0;
}

}  // namespace tmap
