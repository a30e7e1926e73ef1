// PassSteps (mlp.h): a stage's passes as modeled time sees them.
#include "runtime/model/mlp.h"

namespace rp {
namespace {

using Kind = PassStep::Kind;

// A MoE block cut at its two EP exchanges.
void AppendMoeSteps(int l, bool grads_final, std::vector<PassStep>& steps) {
  steps.push_back({Kind::kLayer, l, false, 0});
  steps.push_back({Kind::kEpAllToAll, l, false, 0});
  steps.push_back({Kind::kLayer, l, false, 1});
  steps.push_back({Kind::kEpAllToAll, l, false, 1});
  steps.push_back({Kind::kLayer, l, grads_final, 2});
}

}  // namespace

std::vector<PassStep> PassSteps(std::span<const MlpStage::LayerInfo> layers, int tp, PassKind pass,
                                int ep) {
  std::vector<PassStep> steps;
  const int n = static_cast<int>(layers.size());
  auto cut = [&](const MlpStage::LayerInfo& info) {
    return ep > 1 && info.kind == ShardKind::kMoe && pass != PassKind::kWeight;
  };
  if (pass == PassKind::kForward) {
    for (int l = 0; l < n; ++l) {
      const MlpStage::LayerInfo& info = layers[static_cast<size_t>(l)];
      if (cut(info)) {
        AppendMoeSteps(l, false, steps);
        continue;
      }
      steps.push_back({Kind::kLayer, l, false});
      if (tp > 1 && info.kind == ShardKind::kRowParallel) {
        steps.push_back({Kind::kTpAllReduce, l, false});
      }
    }
    return steps;
  }
  const bool weights = pass == PassKind::kBackward || pass == PassKind::kWeight;
  for (int l = n - 1; l >= 0; --l) {
    const MlpStage::LayerInfo& info = layers[static_cast<size_t>(l)];
    if (cut(info)) {
      AppendMoeSteps(l, weights, steps);
      continue;
    }
    steps.push_back({Kind::kLayer, l, weights});
    if (pass != PassKind::kWeight && tp > 1 && info.kind == ShardKind::kColumnParallel &&
        info.layer != 0) {
      steps.push_back({Kind::kTpAllReduce, l, false});
    }
  }
  return steps;
}

}  // namespace rp
