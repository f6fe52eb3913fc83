// The first looks that a range's samples share while they are tuned (tune_range).

#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tmap {

/// Which arms the samples of one range have given a first look, at which sizes. Their spaces
/// are the range's kernels and their cost model is one: a sample skips the first look at an arm
/// that a sample within a factor of 2 of its size has taken (kernels of neighbouring sizes rank
/// alike), and spends those trials on the arms that proved fast.
class RangeLooks {
 public:
  /// Whether arm `label` had a first look at a size within a factor of 2 of `size`; if not, it
  /// has one now at `size`.
  bool taken_near(const std::string& label, std::int64_t size);

 private:
  std::mutex mutex_;
  std::map<std::string, std::vector<std::int64_t>> sizes_;
};

}  // namespace tmap
