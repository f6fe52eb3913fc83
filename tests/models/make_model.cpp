// tmap_make_model NAME OUT.onnx [--batch N] [--shapes-only]: writes one of the test models
// (resnet_style, resnet50, mobilenet_style, bert_style, conv_nd, fused_patterns) for benchmarks and by hand.
// Without --batch the batch dimension is symbolic ("batch"); --shapes-only makes the weights
// graph inputs of fixed shape instead of random initializers (ResNet-50's are 100 MB).
#include <cstring>
#include <iostream>
#include <string>

#include "onnx_models.h"

int main(int argc, char** argv) {
  using namespace tmap::testing;
  if (argc < 3) {
    std::cerr << "usage: tmap_make_model resnet_style|resnet50|mobilenet_style|bert_style|conv_nd|fused_patterns OUT.onnx "
                 "[--batch N] [--shapes-only] [--batchnorm]\n";
    return 2;
  }
  ModelOptions o;
  for (int i = 3; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) {
      o.symbolic_batch = false;
      o.batch = std::stoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--shapes-only")) {
      o.random_weights = false;
    } else if (!std::strcmp(argv[i], "--batchnorm")) {
      o.batchnorm = true;
    } else {
      std::cerr << "tmap_make_model: unknown argument " << argv[i] << "\n";
      return 2;
    }
  }
  const std::string name = argv[1];
  onnx::ModelProto m = name == "resnet_style" ? resnet_style(o) : name == "resnet50" ? resnet50(o)
                       : name == "mobilenet_style" ? mobilenet_style(o) : name == "bert_style" ? bert_style(o)
                       : name == "conv_nd" ? conv_nd(o) : name == "fused_patterns" ? fused_patterns(o) : onnx::ModelProto();
  if (!m.has_graph()) {
    std::cerr << "tmap_make_model: unknown model " << name << "\n";
    return 2;
  }
  save_model(m, argv[2]);
  return 0;
}
