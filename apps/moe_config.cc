#include "apps/moe_config.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "apps/config.h"
#include "runtime/model/mlp.h"
#include "runtime/status_macros.h"

namespace rp::apps {
namespace {

// Bounds shared with config_validate.cc's budgets: model weights (1 GiB of fp32 for a run, which
// allocates them; 4 TiB for a prediction, which counts them) and modeled messages per device per step.
constexpr double kMaxModelFloats = double{1 << 28};
constexpr double kMaxPredictedFloats = double{int64_t{1} << 40};
constexpr double kMaxMessagesPerDeviceStep = double{1 << 22};
constexpr uint64_t kMaxRowBytes = uint64_t{1} << 30;
// Kept-slot counts of a step's routing (schedule::StepRouting: per MoE block, DP replica,
// micro-batch and expert, 8 bytes each), which a run records every step and an EP prediction
// builds for the replicas it plays: at most 2^24 (128 MiB). Above it `predict` died of std::bad_alloc (86 GB for 10 blocks
// of 65536 experts, dp 64, 256 micro-batches).
constexpr double kMaxRoutingCounts = double{1 << 24};

int NumLayers(const RunConfig& cfg) { return static_cast<int>(cfg.hidden.size()) + 1; }

// A hidden layer between two equal widths: what a MoE block (d -> d) can replace.
bool Eligible(const RunConfig& cfg, int layer) {
  if (layer < 1 || layer > NumLayers(cfg) - 2) return false;
  return cfg.hidden[static_cast<size_t>(layer - 1)] == cfg.hidden[static_cast<size_t>(layer)];
}

absl::Status Bad(const std::string& why) { return absl::InvalidArgumentError(absl::StrCat("moe_layers: ", why)); }

absl::StatusOr<std::vector<int>> EligibleEvery(const RunConfig& cfg, int every, const std::string& text) {
  std::vector<int> layers;
  for (int l = 1; l <= NumLayers(cfg) - 2; ++l) {
    if (l % every == 0 && Eligible(cfg, l)) layers.push_back(l);
  }
  if (layers.empty()) {
    return Bad(absl::StrCat("'", OneLine(text), "' selects no layer: none of the hidden layers 1..",
                            NumLayers(cfg) - 2, every > 1 ? absl::StrCat(" with an index multiple of ", every) : "",
                            " maps between two equal widths (hidden)"));
  }
  return layers;
}

// The field that names the library's ValidateMlpConfig message ("top_k must be ...", "moe_layers:
// ..."), or "" if it is not a MoE field's.
std::string MoeFieldOf(const std::string& msg) {
  for (const char* f : {"moe_layers", "experts", "top_k", "expert_hidden", "capacity_factor", "aux_loss",
                        "router_skew"}) {
    const std::string name(f);
    if (msg.rfind(name + " ", 0) == 0 || msg.rfind(name + ":", 0) == 0) return name;
  }
  return "";
}


absl::Status CheckValues(const RunConfig& cfg) {
  if (cfg.top_k > cfg.experts) {
    return FieldError("top_k", absl::StrCat(cfg.top_k, " is more than experts=", cfg.experts,
                                            " (each token picks top_k distinct experts)"));
  }
  // capacity_factor: any finite C (a capacity past every token count keeps every slot). The other
  // two are bounded where fp32 still holds what they feed: the auxiliary loss's router gradient and
  // the logit offsets (past ~100 the router already picks the lowest experts every time).
  struct Bounded {
    const char* name;
    double value, max;
    const char* note;
  };
  for (const Bounded& b : {Bounded{"capacity_factor", cfg.capacity_factor, HUGE_VAL, " (0 = dropless)"},
                           Bounded{"aux_loss", cfg.aux_loss, kMaxAuxLoss, ""},
                           Bounded{"router_skew", cfg.router_skew, kMaxRouterSkew, ""}}) {
    if (!(std::isfinite(b.value) && b.value >= 0 && b.value <= b.max)) {
      return FieldError(b.name, absl::StrCat(b.max == HUGE_VAL ? "must be finite and >= 0"
                                                               : absl::StrCat("must be in [0, ", b.max, "]"),
                                             b.note, ", got ", b.value));
    }
  }
  if (cfg.ep_row_bytes % 4 != 0 || cfg.ep_row_bytes > kMaxRowBytes) {
    return FieldError("ep_row_bytes", absl::StrCat("must be ", kEpRowBytesRange, ", got ", cfg.ep_row_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckEp(const RunConfig& cfg, int blocks) {
  if (cfg.ep == 1) return absl::OkStatus();
  if (blocks == 0) {
    return FieldError("ep", absl::StrCat(cfg.ep, " > 1 needs MoE layers (moe_layers is empty): EP spreads the experts "
                                         "of MoE blocks"));
  }
  if (cfg.experts % cfg.ep != 0) {
    return FieldError("ep", absl::StrCat(cfg.ep, " does not divide experts=", cfg.experts,
                                         " (EP rank q owns experts [q*experts/ep, (q+1)*experts/ep))"));
  }
  if (cfg.dp % cfg.ep != 0) {
    return FieldError("ep", absl::StrCat("dp=", cfg.dp, " is not a multiple of ep=", cfg.ep,
                                         " (the EP group is carved out of the data-parallel replicas)"));
  }
  // The FLOPs model's derived row is the described tokens already in bf16 (EpRowBytes): a lossy
  // ep_codec would shrink those bytes a second time (bf16 of bf16 = 1 byte a value).
  if (cfg.ep_codec != comm::Codec::kFp32 && cfg.ep_row_bytes == 0 && cfg.cost_model != CostModelKind::kFixed) {
    return FieldError("ep_codec", absl::StrCat(comm::CodecName(cfg.ep_codec), " with the FLOPs model's derived "
                                               "ep_row_bytes (", EpRowBytes(cfg), " B: the described tokens, already bf16) "
                                               "would encode bf16 bytes again; set ep_row_bytes to the row in fp32 (",
                                               std::min(2 * EpRowBytes(cfg), kMaxRowBytes), ") to model an EP wire format"));
  }
  if (const double m = EpTrafficPerDeviceStep(cfg, blocks).messages; m > kMaxMessagesPerDeviceStep) {
    return FieldError(cfg.segment_bytes > 0 ? "segment_bytes" : "ep",
                      absl::StrFormat("about %.3g modeled EP all-to-all messages per device per step; at most %.3g", m,
                                      kMaxMessagesPerDeviceStep));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int>> ResolveMoeLayers(const RunConfig& cfg) {
  const std::string text(absl::StripAsciiWhitespace(cfg.moe_layers));
  if (text.empty() || text == "none") return std::vector<int>{};
  if (text == "all") return EligibleEvery(cfg, 1, text);
  if (absl::string_view rest = text; absl::ConsumePrefix(&rest, "every:")) {
    int every = 0;
    if (!absl::SimpleAtoi(rest, &every) || every < 1) {
      return Bad(absl::StrCat("'", OneLine(text), "': every:N needs an integer N >= 1"));
    }
    return EligibleEvery(cfg, every, text);
  }
  std::vector<int> layers;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int layer = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &layer)) {
      return Bad(absl::StrCat("'", OneLine(text), "' is not none, all, every:N or a comma list of layer indices"));
    }
    if (!layers.empty() && layer <= layers.back()) {
      return Bad(absl::StrCat("entries must be strictly increasing, got ", layer, " after ", layers.back()));
    }
    if (layers.size() >= kMaxListItems) return Bad(absl::StrCat("at most ", kMaxListItems, " layers"));
    layers.push_back(layer);
  }
  return layers;
}

absl::Status CheckMoe(const RunConfig& cfg, bool for_run) {
  auto layers = ResolveMoeLayers(cfg);
  if (!layers.ok()) {
    const std::string msg(layers.status().message());
    return FieldError("moe_layers", msg.substr(msg.find(": ") + 2));
  }
  RP_RETURN_IF_ERROR(CheckValues(cfg));
  const int blocks = static_cast<int>(layers->size());
  if (blocks > 0) {
    // The model's own checks (eligible layers, expert shape), each naming its field.
    if (absl::Status st = ValidateMlpConfig(cfg.Mlp()); !st.ok()) {
      const std::string msg(st.message());
      const std::string field = MoeFieldOf(msg);
      if (!field.empty()) {
        const size_t cut = msg.find_first_not_of(": ", field.size());
        return FieldError(field, cut == std::string::npos ? msg : msg.substr(cut));
      }
    }
    double expert_weights = 0;
    for (const int layer : *layers) {
      const double width = cfg.hidden[static_cast<size_t>(layer - 1)];
      expert_weights += static_cast<double>(cfg.experts) * (2 * width * cfg.expert_hidden + cfg.expert_hidden + width + width);
    }
    const double most = for_run ? kMaxModelFloats : kMaxPredictedFloats;
    if (expert_weights > most) {
      return FieldError("experts", absl::StrFormat("the MoE blocks hold %.0f weights; at most %.0f (%s of fp32)",
                                                   expert_weights, most, for_run ? "1 GiB" : "4 TiB"));
    }
    // A run records every replica's routing; a prediction builds (balanced) routing only for EP
    // exchanges, and at best for one EP group (CheckPredictable checks the replicas it plays).
    if (for_run) {
      RP_RETURN_IF_ERROR(CheckRoutingCounts(cfg, cfg.dp));
    } else if (cfg.ep > 1) {
      RP_RETURN_IF_ERROR(CheckRoutingCounts(cfg, cfg.ep));
    }
  }
  return CheckEp(cfg, blocks);
}

absl::Status CheckRoutingCounts(const RunConfig& cfg, int replicas) {
  absl::StatusOr<std::vector<int>> layers = ResolveMoeLayers(cfg);
  if (!layers.ok()) return layers.status();
  const int blocks = static_cast<int>(layers->size());
  const double counts = static_cast<double>(blocks) * replicas * cfg.microbatches * cfg.experts;
  if (counts <= kMaxRoutingCounts) return absl::OkStatus();
  const bool all = replicas == cfg.dp;
  const int n = all ? cfg.dp : cfg.ep;
  const char* field = cfg.experts >= std::max(n, cfg.microbatches) ? "experts"
                      : cfg.microbatches >= n                       ? "microbatches"
                      : all                                         ? "dp"
                                                                    : "ep";
  return FieldError(field, absl::StrFormat("a step's MoE routing (%d blocks x %s=%d x microbatches=%d x "
                                           "experts=%d kept-slot counts) would take %.3g GB; at most %.0f "
                                           "counts (128 MiB)",
                                           blocks, all ? "dp" : "ep", n, cfg.microbatches, cfg.experts,
                                           counts * 8 / 1e9, kMaxRoutingCounts));
}

EpTraffic EpTrafficPerDeviceStep(const RunConfig& cfg, int blocks) {
  if (cfg.ep <= 1 || blocks == 0 || cfg.hidden.empty()) return {};
  const double widest = *std::max_element(cfg.hidden.begin(), cfg.hidden.end());
  const double row_bytes = EpRowBytes(cfg) > 0 ? static_cast<double>(EpRowBytes(cfg)) : 4.0 * widest;
  const double block_bytes = row_bytes * cfg.top_k * cfg.microbatch_size;
  const double per_block =
      cfg.segment_bytes > 0 ? 1 + std::ceil(block_bytes / static_cast<double>(cfg.segment_bytes)) : 2;
  const double exchanges = blocks * static_cast<double>(cfg.microbatches) * 3 * 2 * (cfg.ep - 1);
  return {.messages = exchanges * per_block, .bytes = exchanges * block_bytes};
}

uint64_t EpRowBytes(const RunConfig& cfg) {
  if (cfg.ep_row_bytes != 0 || cfg.cost_model == CostModelKind::kFixed) return cfg.ep_row_bytes;
  const double tokens = static_cast<double>(cfg.flops.microbatch_size) * cfg.flops.seq_len / std::max(1, cfg.microbatch_size);
  const double bytes = std::ceil(tokens * cfg.flops.hidden * 2 / 4) * 4;
  return static_cast<uint64_t>(std::min(bytes, static_cast<double>(kMaxRowBytes)));
}

}  // namespace rp::apps
