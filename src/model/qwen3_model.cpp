// Qwen3 forward and backward over backend::Backend.
#include "model/qwen3_model.h"

#include <cmath>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace echo::model {

using comm::Direction;

namespace {

std::unique_ptr<backend::Backend> cpu_backend_unless(backend::Backend* given) {
  return given ? nullptr : std::make_unique<backend::CpuBackend>();
}

// y (rows, out) = x (rows, in) · W^T, W: (out, in)
void linear(backend::Backend& be, const Tensor& x, const Tensor& w, Tensor& y) {
  be.gemm(false, true, 1.0, x, w, 0.0, y);
}
// dx (rows, in) (+)= dy (rows, out) · W
void linear_dx(backend::Backend& be, const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) {
  be.gemm(false, false, 1.0, dy, w, accumulate ? 1.0 : 0.0, dx);
}
// dW (out, in) += dy^T (out, rows) · x (rows, in)
void linear_dw(backend::Backend& be, const Tensor& dy, const Tensor& x, Tensor& dw) {
  be.gemm(true, false, 1.0, dy, x, 1.0, dw);
}

// A host int32 array as a tensor view (no copy).
Tensor host_ints(const int32_t* p, int64_t n) { return Tensor::from_blob(const_cast<int32_t*>(p), {n}, DType::i32); }

// What needs gradients (`what`: backward() and the forward that saves tensors for it) is refused
// on a model built for evaluation (Pass::evaluation), before any work or allocation.
template <class T>
void require_gradients(const ParameterSet<T>& params, const char* what) {
  ECHO_CHECK(params.grads().defined(), "{} of a model built for evaluation, which has no gradients", what);
}

}  // namespace

template <class T>
Qwen3Model<T>::Qwen3Model(const ModelShape& shape, TpOps<T>& tp, backend::Backend* backend, Pass pass)
    : owned_backend_(cpu_backend_unless(backend)),
      be_(backend ? *backend : *owned_backend_),
      act_dtype_(be_.activation_dtype(master_dtype<T>())),
      stat_dtype_(be_.statistic_dtype(master_dtype<T>())),
      shape_(shape),
      plan_(make_qwen3_plan(shape_)),
      params_(plan_, shape_, be_, pass),
      tp_(tp) {
  ECHO_CHECK(tp.size() == shape.tp && tp.rank() == shape.tp_rank,
             "the model shape is for tp rank {} of {}, but its TP group has rank {} of {}", shape.tp_rank, shape.tp,
             tp.rank(), tp.size());
}

template <class T>
void Qwen3Model<T>::check_batch(const Batch& b) const {
  ECHO_CHECK(b.batch >= 1 && b.seq >= 1, "a batch needs at least one sequence of one token, got ({}, {})", b.batch,
             b.seq);
  ECHO_CHECK(b.tokens && b.targets, "a batch needs tokens and targets");
  for (int64_t i = 0; i < b.num_tokens(); ++i) {
    ECHO_CHECK(b.tokens[i] >= 0 && b.tokens[i] < shape_.vocab,
               "token id {} at position {} is outside the vocabulary of {} ids", b.tokens[i], i, shape_.vocab);
    ECHO_CHECK(b.targets[i] == kIgnoreIndex || (b.targets[i] >= 0 && b.targets[i] < shape_.vocab),
               "target id {} at position {} is outside the vocabulary of {} ids", b.targets[i], i, shape_.vocab);
  }
}

template <class T>
double Qwen3Model<T>::forward(const Batch& b, bool keep_activations) {
  Tensor loss = loss_accumulator();
  forward(b, keep_activations, loss, 1.0);
  return read_loss(loss);
}

template <class T>
void Qwen3Model<T>::forward(const Batch& b, bool keep_activations, Tensor& loss_acc, double divisor) {
  if (keep_activations) require_gradients(params_, "a forward for backward()");
  check_batch(b);
  const int64_t n = b.num_tokens(), H = shape_.hidden;
  // The last forward's tensors go before this one allocates (an evaluation keeps them, as a
  // forward without backward), so one micro-batch's activations are alive at a time
  // (model/memory_plan.h counts exactly that).
  release_forward_state();
  final_hidden_ = {};
  batch_ = b;
  // The batch goes to the device once: tokens, targets and the positions within each sequence.
  std::vector<int32_t> positions(n);
  for (int64_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(i % b.seq);
  tokens_ = be_.empty({n}, DType::i32);
  targets_ = be_.empty({n}, DType::i32);
  positions_ = be_.empty({n}, DType::i32);
  be_.copy_from(tokens_, host_ints(b.tokens, n));
  be_.copy_from(targets_, host_ints(b.targets, n));
  be_.copy_from(positions_, host_ints(positions.data(), n));

  // Vocab-parallel embedding: each rank fills the rows it owns, the exact sum completes them.
  Tensor x = act({n, H});
  be_.embedding_forward(tokens_, params_.compute(plan_.embed), shape_.vocab_begin(), x);
  tp_.edge_sum(x, {0, Direction::forward});

  tp_.begin_pass(Direction::forward);
  // Without a backward to come (an evaluation), each layer's saved tensors go when the layer
  // ends: one layer's are alive at a time, not every layer's (model/memory_plan.h, Pass).
  acts_.assign(keep_activations ? shape_.layers : 0, {});
  for (int64_t l = 0; l < shape_.layers; ++l) {
    if (keep_activations) {
      layer_forward(l, x, acts_[l]);
    } else {
      LayerActs layer;
      layer_forward(l, x, layer);
    }
  }

  final_hidden_ = x;
  final_norm_out_ = act({n, H});
  final_rstd_ = stat({n});
  be_.rmsnorm_forward(x, params_.compute(plan_.final_norm), shape_.norm_eps, final_norm_out_, final_rstd_);
  const int64_t V = shape_.vocab_local();
  logits_ = act({n, V});
  linear(be_, final_norm_out_, params_.compute(plan_.lm_head), logits_);
  ce_lse_ = stat({n});
  be_.cross_entropy_forward(logits_, targets_, shape_.vocab_begin(), kIgnoreIndex, tp_.reducer(), ce_lse_, divisor,
                            loss_acc);
  count_ = 0;
  for (int64_t i = 0; i < n; ++i) count_ += b.targets[i] != kIgnoreIndex;
  have_acts_ = keep_activations;
}

template <class T>
void Qwen3Model<T>::layer_forward(int64_t l, Tensor& x, LayerActs& a) {
  const auto& p = plan_.layers[l];
  const int64_t n = batch_.num_tokens(), H = shape_.hidden, D = shape_.head_dim;
  const int64_t B = batch_.batch, S = batch_.seq;
  const int64_t hq = shape_.heads_local(), hkv = shape_.kv_heads_local(), F = shape_.ffn_local();
  const double eps = shape_.norm_eps;

  // Attention: h1 = RMSNorm(x); q, k, v column-parallel; per-head q_norm, k_norm; RoPE.
  a.x_in = copy_of(x);
  a.h1 = act({n, H});
  a.rstd1 = stat({n});
  be_.rmsnorm_forward(x, params_.compute(p.input_norm), eps, a.h1, a.rstd1);
  a.q_raw = act({n, hq * D});
  a.k_raw = act({n, hkv * D});
  a.v = act({n, hkv * D});
  project(l, kQ, a.h1, p.q, a.q_raw, a);
  project(l, kK, a.h1, p.k, a.k_raw, a);
  project(l, kV, a.h1, p.v, a.v, a);
  a.q = act({n, hq, D});
  a.k = act({n, hkv, D});
  a.q_rstd = stat({n * hq});
  a.k_rstd = stat({n * hkv});
  be_.rmsnorm_forward(a.q_raw.view({n * hq, D}), params_.compute(p.q_norm), eps, a.q, a.q_rstd);
  be_.rmsnorm_forward(a.k_raw.view({n * hkv, D}), params_.compute(p.k_norm), eps, a.k, a.k_rstd);
  be_.rope_forward(a.q, positions_, shape_.rope_base);
  be_.rope_forward(a.k, positions_, shape_.rope_base);
  a.attn = act({B, S, hq, D});
  a.lse = stat({B, hq, S});
  be_.attention_forward(a.q.view({B, S, hq, D}), a.k.view({B, S, hkv, D}), a.v.view({B, S, hkv, D}), a.attn, a.lse);
  // o row-parallel, then the forward site.
  Tensor o = act({n, H});
  project(l, kO, a.attn.view({n, hq * D}), p.o, o, a);
  tp_.block_site(o, {static_cast<int>(2 * l), Direction::forward});
  be_.add_inplace(x, o);

  // MLP: h2 = RMSNorm(x); down(silu(gate(h2)) * up(h2)).
  a.x_mid = copy_of(x);
  a.h2 = act({n, H});
  a.rstd2 = stat({n});
  be_.rmsnorm_forward(x, params_.compute(p.post_norm), eps, a.h2, a.rstd2);
  a.gate = act({n, F});
  a.up = act({n, F});
  a.act = act({n, F});
  project(l, kGate, a.h2, p.gate, a.gate, a);
  project(l, kUp, a.h2, p.up, a.up, a);
  be_.swiglu_forward(a.gate, a.up, a.act);
  Tensor d = act({n, H});
  project(l, kDown, a.act, p.down, d, a);
  tp_.block_site(d, {static_cast<int>(2 * l + 1), Direction::forward});
  be_.add_inplace(x, d);
}

template <class T>
void Qwen3Model<T>::backward(T loss_scale) {
  require_gradients(params_, "backward()");
  ECHO_CHECK(have_acts_, "backward() needs a forward(keep_activations = true) before it");
  const int64_t n = batch_.num_tokens(), H = shape_.hidden, V = shape_.vocab_local();

  Tensor dlogits = act({n, V});
  be_.cross_entropy_backward(logits_, targets_, ce_lse_, shape_.vocab_begin(), kIgnoreIndex, count_,
                             static_cast<double>(loss_scale), dlogits);
  linear_dw(be_, dlogits, final_norm_out_, params_.grad(plan_.lm_head));
  // LM-head input gradient: a partial sum over the vocab shards, completed exactly.
  Tensor dh = act({n, H}), dx = act({n, H});
  linear_dx(be_, dlogits, params_.compute(plan_.lm_head), dh, false);
  tp_.edge_sum(dh, {0, Direction::backward});
  be_.rmsnorm_backward(dh, final_hidden_, params_.compute(plan_.final_norm), final_rstd_, dx,
                       params_.grad(plan_.final_norm));

  tp_.begin_pass(Direction::backward);
  norm_grads_ = be_.zeros({2 * shape_.layers, shape_.head_dim}, master_dtype<T>());
  int site = 0;
  for (int64_t l = shape_.layers - 1; l >= 0; --l) layer_backward(l, dx, acts_[l], site);

  // Every rank holds the full dx; each scatters into the vocab rows it owns.
  be_.embedding_backward(tokens_, dx, shape_.vocab_begin(), params_.grad(plan_.embed));
  // q_norm / k_norm act on this rank's heads only: this micro-batch's share of their gradients
  // is a partial sum. It is summed over TP on its own (one collective for all layers) and then
  // added: summing the accumulated gradient instead would count every earlier micro-batch of
  // the step again, micro-batch m of M tp^(M-m) times.
  tp_.exact_sum(norm_grads_);
  for (int64_t l = 0; l < shape_.layers; ++l) {
    const auto& p = plan_.layers[l];
    be_.add_inplace(params_.grad(p.q_norm), norm_grad(l, false));
    be_.add_inplace(params_.grad(p.k_norm), norm_grad(l, true));
  }

  release_forward_state();
}

template <class T>
void Qwen3Model<T>::release_forward_state() {
  tokens_ = {}, targets_ = {}, positions_ = {};
  acts_.clear();
  final_norm_out_ = {}, final_rstd_ = {}, logits_ = {}, ce_lse_ = {}, norm_grads_ = {};
  // final_hidden_ stays: final_hidden() reads it after the pass (a view of the residual stream).
  have_acts_ = false;
}

template <class T>
void Qwen3Model<T>::layer_backward(int64_t l, Tensor& dx, LayerActs& a, int& site) {
  const auto& p = plan_.layers[l];
  const int64_t n = batch_.num_tokens(), H = shape_.hidden, D = shape_.head_dim;
  const int64_t B = batch_.batch, S = batch_.seq;
  const int64_t hq = shape_.heads_local(), hkv = shape_.kv_heads_local(), F = shape_.ffn_local();

  // MLP. dx is the gradient of the block output; the residual passes it through unchanged.
  Tensor dact = act({n, F}), dgate = act({n, F}), dup = act({n, F}), dh = act({n, H}), dnorm = act({n, H});
  project_backward(l, kDown, dx, a.act, p.down, dact, false, a);
  be_.swiglu_backward(dact, a.gate, a.up, dgate, dup);
  project_backward(l, kGate, dgate, a.h2, p.gate, dh, false, a);
  project_backward(l, kUp, dup, a.h2, p.up, dh, true, a);
  tp_.block_site(dh, {site++, Direction::backward});
  be_.rmsnorm_backward(dh, a.x_mid, params_.compute(p.post_norm), a.rstd2, dnorm, params_.grad(p.post_norm));
  be_.add_inplace(dx, dnorm);
  a.gate = {}, a.up = {}, a.act = {}, a.h2 = {}, a.x_mid = {};

  // Attention.
  Tensor dattn = act({B, S, hq, D}), dq = act({B, S, hq, D}), dk = act({B, S, hkv, D}), dv = act({B, S, hkv, D});
  Tensor dattn2 = dattn.view({n, hq * D});
  project_backward(l, kO, dx, a.attn.view({n, hq * D}), p.o, dattn2, false, a);
  be_.attention_backward(dattn, a.q.view({B, S, hq, D}), a.k.view({B, S, hkv, D}), a.v.view({B, S, hkv, D}), a.attn,
                         a.lse, dq, dk, dv);
  Tensor dq3 = dq.view({n, hq, D}), dk3 = dk.view({n, hkv, D});
  be_.rope_backward(dq3, positions_, shape_.rope_base);
  be_.rope_backward(dk3, positions_, shape_.rope_base);
  Tensor dq_raw = act({n * hq, D}), dk_raw = act({n * hkv, D});
  Tensor q_norm_grad = norm_grad(l, false), k_norm_grad = norm_grad(l, true);
  be_.rmsnorm_backward(dq.view({n * hq, D}), a.q_raw.view({n * hq, D}), params_.compute(p.q_norm), a.q_rstd, dq_raw,
                       q_norm_grad);
  be_.rmsnorm_backward(dk.view({n * hkv, D}), a.k_raw.view({n * hkv, D}), params_.compute(p.k_norm), a.k_rstd, dk_raw,
                       k_norm_grad);
  project_backward(l, kQ, dq_raw.view({n, hq * D}), a.h1, p.q, dh, false, a);
  project_backward(l, kK, dk_raw.view({n, hkv * D}), a.h1, p.k, dh, true, a);
  project_backward(l, kV, dv.view({n, hkv * D}), a.h1, p.v, dh, true, a);
  tp_.block_site(dh, {site++, Direction::backward});
  be_.rmsnorm_backward(dh, a.x_in, params_.compute(p.input_norm), a.rstd1, dnorm, params_.grad(p.input_norm));
  be_.add_inplace(dx, dnorm);
  a = {};
}

template <class T>
void Qwen3Model<T>::set_int8_linear(const quant::Int8LinearConfig& cfg, const std::vector<std::string>& projections) {
  ECHO_CHECK((std::is_same_v<T, float>), "INT8 linear layers run in fp32 models only");
  int8_.reset();
  if (cfg.mode == config::LinearMode::bf16) return;
  int8_ = cfg;
  const auto& names = config::LinearConfig::kProjectionNames;
  for (int p = 0; p < kNumProj; ++p) int8_proj_[p] = projections.empty();
  for (const std::string& name : projections) {
    int found = -1;
    for (int p = 0; p < kNumProj; ++p)
      if (name == names[p]) found = p;
    ECHO_CHECK(found >= 0, "'linear.projections' names '{}', which is not a block projection", name);
    int8_proj_[found] = true;
  }
}

template <class T>
quant::LinearContext Qwen3Model<T>::linear_context(int64_t l, Proj proj, int64_t out) const {
  quant::LinearContext ctx;
  ctx.step = step_;
  ctx.layer = static_cast<uint32_t>(l);
  ctx.site = static_cast<uint32_t>(proj);
  ctx.token_offset = token_offset_;
  ctx.seq_len = batch_.seq;
  const bool row_parallel = proj == kO || proj == kDown;
  if (shape_.tp > 1) {
    ctx.tp_style = row_parallel ? quant::TpStyle::row : quant::TpStyle::column;
    ctx.tp = &tp_.reducer();
    // Column shards own output channels [rank * out, (rank + 1) * out) of the full layer.
    if (!row_parallel) ctx.channel_offset = static_cast<int64_t>(shape_.tp_rank) * out;
  }
  return ctx;
}

template <class T>
void Qwen3Model<T>::project(int64_t l, Proj proj, const Tensor& x, size_t w, Tensor& y, LayerActs& a) {
  if (int8_ && int8_proj_[proj]) {
    be_.int8_linear_forward(*int8_, linear_context(l, proj, y.dim(-1)), x, params_.value(w), y, a.int8[proj]);
    return;
  }
  linear(be_, x, params_.compute(w), y);
}

template <class T>
void Qwen3Model<T>::project_backward(int64_t l, Proj proj, const Tensor& dy, const Tensor& x, size_t w, Tensor& dx,
                                     bool accumulate_dx, LayerActs& a) {
  if (int8_ && int8_proj_[proj]) {
    be_.int8_linear_backward(*int8_, linear_context(l, proj, dy.dim(-1)), dy, a.int8[proj], &dx, accumulate_dx,
                             &params_.grad(w));
    return;
  }
  linear_dw(be_, dy, x, params_.grad(w));
  linear_dx(be_, dy, params_.compute(w), dx, accumulate_dx);
}

template <class T>
double Qwen3Model<T>::forward_backward(const Batch& b, T loss_scale) {
  require_gradients(params_, "forward_backward()");
  Tensor loss = loss_accumulator();
  forward_backward(b, loss_scale, loss, 1.0);
  return read_loss(loss);  // after backward: a fault noted there is raised here too
}

template <class T>
void Qwen3Model<T>::forward_backward(const Batch& b, T loss_scale, Tensor& loss_acc, double divisor) {
  forward(b, true, loss_acc, divisor);
  backward(loss_scale);
}

template class Qwen3Model<float>;
template class Qwen3Model<double>;

}  // namespace echo::model
