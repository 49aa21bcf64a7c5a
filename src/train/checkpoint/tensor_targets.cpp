// Reading a checkpoint's tensors into shards (see tensor_targets.h).
#include "train/checkpoint/tensor_targets.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "core/error.h"
#include "dist/agreement.h"
#include "train/checkpoint/layout.h"
#include "train/checkpoint/shard_io.h"
#include "train/divergence.h"

namespace echo::train::ckpt {
namespace {

bool converts_to_f32(StDtype d) {
  return d == StDtype::f32 || d == StDtype::bf16 || d == StDtype::f16 || d == StDtype::f64;
}

// What a loaded tensor may hold. Weights: finite and within kMaxSaneWeight, what the trainer
// checks before every save (a checkpoint beyond it is corrupt, and resuming from it would blame
// the first step). Moments: finite, and the second one non-negative (AdamW takes its root).
enum class Values { weights, first_moment, second_moment };

Values values_of(const std::string& name) {
  if (name.ends_with(kMomentSuffix[1])) return Values::second_moment;
  if (name.ends_with(kMomentSuffix[0])) return Values::first_moment;
  return Values::weights;
}

}  // namespace

ShapeSummary summarize(const model::ParameterSet<float>& params) {
  std::map<std::string, const model::ParamSpec*> by_name;
  for (size_t i = 0; i < params.size(); ++i) by_name[params[i].spec->name] = params[i].spec;
  auto need = [&](const std::string& name) -> const std::vector<int64_t>& {
    const auto it = by_name.find(name);
    ECHO_CHECK(it != by_name.end(), "the parameter set has no '{}': not a Qwen3 model", name);
    return it->second->full_shape;
  };
  ShapeSummary s;
  s.vocab = need("model.embed_tokens.weight")[0];
  s.hidden = need("model.embed_tokens.weight")[1];
  while (by_name.count(fmt::format("model.layers.{}.input_layernorm.weight", s.layers))) ++s.layers;
  ECHO_CHECK(s.layers > 0, "the parameter set has no layers");
  s.head_dim = need("model.layers.0.self_attn.q_norm.weight")[0];
  s.heads = need("model.layers.0.self_attn.q_proj.weight")[0] / s.head_dim;
  s.kv_heads = need("model.layers.0.self_attn.k_proj.weight")[0] / s.head_dim;
  s.ffn = need("model.layers.0.mlp.gate_proj.weight")[0];
  s.tie_embeddings = by_name.count("lm_head.weight") == 0;
  return s;
}

void check_shards(const model::ParameterSet<float>& params, const AdamW* opt, int tp) {
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    ECHO_CHECK(
        p.numel() == p.spec->local_numel(tp),
        "parameter '{}' holds {} elements, but its shard {} at tp = {} has {} (parameters built for another tp?)",
        p.spec->name, p.numel(), format_shape(p.spec->local_shape(tp)), tp, p.spec->local_numel(tp));
  }
  if (opt == nullptr) return;
  ECHO_CHECK(opt->size() == params.size(), "the optimizer holds moments for {} parameters, the model has {}",
             opt->size(), params.size());
  for (size_t i = 0; i < params.size(); ++i)
    ECHO_CHECK(opt->exp_avg(i).numel() == params[i].numel() && opt->exp_avg_sq(i).numel() == params[i].numel(),
               "the optimizer moments of '{}' hold {} / {} elements, the parameter {}", params[i].spec->name,
               opt->exp_avg(i).numel(), opt->exp_avg_sq(i).numel(), params[i].numel());
}

Target make_target(std::string name, const model::ParamSpec* spec, Tensor& dest) {
  Target t{std::move(name), spec, {}, nullptr, {}};
  if (dest.is_cpu()) {
    t.out = host_span<float>(dest);
  } else {
    t.staged = Tensor::empty(dest.shape(), DType::f32);
    t.stage_to = &dest;
    t.out = host_span<float>(t.staged);
  }
  return t;
}

void check_targets(const TensorFiles& files, const std::vector<Target>& targets, const std::set<std::string>& ignored,
                   const std::string& source) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const auto& t : targets) {
    expected.insert(t.name);
    const auto it = files.find(t.name);
    if (it == files.end()) {
      problems.push_back(fmt::format("'{}' has no tensor '{}' (the model expects shape {})", source, t.name,
                                     format_shape(t.spec->full_shape)));
      continue;
    }
    const StTensorInfo& info = it->second->info(t.name);
    if (info.shape != t.spec->full_shape)
      problems.push_back(fmt::format("'{}': tensor '{}' has shape {} but the model expects {}", it->second->path(),
                                     t.name, format_shape(info.shape), format_shape(t.spec->full_shape)));
    else if (!converts_to_f32(info.dtype))
      problems.push_back(fmt::format("'{}': tensor '{}' is {}, not a floating dtype", it->second->path(), t.name,
                                     st_dtype_name(info.dtype)));
  }
  for (const auto& [name, file] : files)
    if (!expected.count(name) && !ignored.count(name))
      problems.push_back(
          fmt::format("'{}' holds tensor '{}' {} that the model does not have (a checkpoint of another "
                      "model: layer count or tie_embeddings differ?)",
                      file->path(), name, format_shape(file->info(name).shape)));
  if (problems.empty()) return;
  std::string msg = problems.front();
  if (problems.size() > 1) msg += fmt::format(" (and {} more problems)", problems.size() - 1);
  ECHO_INPUT_FAIL("{}", msg);
}

std::string read_targets(const TensorFiles& files, const std::vector<Target>& targets, int tp, int tp_rank) {
  for (const auto& t : targets) {
    const std::string& path = files.at(t.name)->path();
    try {
      read_shard(*files.at(t.name), t.name, *t.spec, tp, tp_rank, t.out);
    } catch (const std::exception& e) {
      return dist::error_text(e);
    }
    const Values kind = values_of(t.name);
    for (size_t i = 0; i < t.out.size(); ++i) {
      const float v = t.out[i];
      std::string what;
      if (std::isnan(v))
        what = "a NaN";
      else if (std::isinf(v))
        what = "an infinity";
      else if (kind == Values::weights && std::fabs(v) > kMaxSaneWeight)
        what = fmt::format("{:g}, beyond the {:g} in magnitude that trained weights stay within", v, kMaxSaneWeight);
      else if (kind == Values::second_moment && v < 0.0f)
        what = fmt::format("{:g}, a negative second moment", v);
      if (!what.empty())
        return fmt::format(
            "'{}': tensor '{}' holds {} (element {} of the shard of tp rank {} of {}): the file is corrupt", path,
            t.name, what, i, tp_rank, tp);
    }
    if (t.stage_to) t.stage_to->copy_from(t.staged);
  }
  return {};
}

TensorFiles index_of(const SafetensorsFile& file) {
  TensorFiles out;
  for (const auto& name : file.names()) out[name] = &file;
  return out;
}

std::vector<Target> param_targets(model::ParameterSet<float>& params) {
  std::vector<Target> out;
  for (size_t i = 0; i < params.size(); ++i)
    out.push_back(make_target(params[i].spec->name, params[i].spec, params[i].value));
  return out;
}

}  // namespace echo::train::ckpt
