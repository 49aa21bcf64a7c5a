// The key table: every section's keys in file order, each with its one-line doc and the rule
// its value obeys. Reading, range checking, writing and key listing all walk this one table
// (through a visitor), so a key added here is known to all of them. Internal to src/core/config.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace echo::config::schema {

// A value's constraint. `number` returns "" when the value is fine, else what is wrong,
// phrased to follow "'key' = value ", e.g. "is out of range [0, 1]".
struct Check {
  std::function<std::string(double)> number;
  bool non_empty = false;  // for strings
};

Check at_least(double lo);
Check greater_than(double lo);
Check in_closed(double lo, double hi);
Check in_half_open(double lo, double hi);  // [lo, hi)
Check fp32_decay();                        // [0, 1) and below 1 once rounded to fp32
Check fp32_positive();                     // > 0 and above 0 once rounded to fp32
// fp32_positive, and "must be <= hi (why)" above hi.
Check fp32_positive_at_most(double hi, std::string why);
// 0 (a setting that is off), or fp32_positive: a value that is 0 only once rounded to fp32 is
// neither.
Check fp32_off_or_positive();
Check power_of_two(double lo, double hi);
Check one_of(std::vector<int> allowed);
Check even_at_least(double lo, std::string why);
// [lo, hi]: "must be >= lo" below, "must be <= hi (why)" above.
Check between(double lo, double hi, std::string why);
Check even_between(double lo, double hi, std::string why_even, std::string why_hi);
Check non_empty();

// "a.b" from prefix "a" and key "b"; the key alone at the top level.
std::string dotted(const std::string& prefix, const std::string& key);

// How a value is spelled in YAML so that it reads back to the same value: doubles in their
// shortest round-trip form with a '.' (YAML 1.1 readers need it), strings quoted when plain
// text would read as another type.
std::string yaml_scalar(double value);
std::string yaml_scalar(int value);
std::string yaml_scalar(std::uint64_t value);
std::string yaml_scalar(bool value);
std::string yaml_scalar(const std::string& value);
template <ConfigEnum E>
std::string yaml_scalar(E value) {
  return std::string(to_string(value));
}

// ---- the table. A visitor V has
//   template <class T> void field(const char* key, T& value, const char* doc, const Check& = {});
//   template <class S> void section(const char* key, S& value, const char* doc);

template <class V>
void visit(RunConfig& c, V& v) {
  v.field("seed", c.seed, "seeds init, data order and the S3R thresholds");
  v.field("device", c.device, "cpu | cuda: the backend that runs the ops");
  v.field("out_dir", c.out_dir, "checkpoints, metrics and the effective config go here", non_empty());
  v.field("init_from", c.init_from, "Hugging Face Qwen3 safetensors file, index json or directory to start from");
}

template <class V>
void visit(ModelConfig& c, V& v) {
  // NOTE: the upper bounds below are far above any published model and keep the products the
  // model and trainer form in int (layers * heads * head_dim, micro_batch * dp) from overflowing;
  // check_memory (checks.cpp) bounds the combination.
  v.field("vocab_size", c.vocab_size, "embedding rows (Qwen3: 151936 = 128 x 1187)",
          between(1, 1 << 24, "token ids index a table of at most 2^24 entries"));
  v.field("vocab_pad_multiple", c.vocab_pad_multiple, "vocab_size is rounded up to a multiple of this",
          in_closed(1, 1 << 20));
  v.field("hidden", c.hidden, "residual stream width", between(1, 1 << 17, "far above any published model"));
  v.field("ffn", c.ffn, "MLP inner width", between(1, 1 << 20, "far above any published model"));
  v.field("layers", c.layers, "transformer blocks", between(1, 1024, "layers x heads x head_dim must fit an int"));
  v.field("heads", c.heads, "query heads; a multiple of kv_heads",
          between(1, 1024, "layers x heads x head_dim must fit an int"));
  v.field("kv_heads", c.kv_heads, "key/value heads (GQA)", between(1, 1024, "far above any published model"));
  v.field("head_dim", c.head_dim, "width of one head, even",
          even_between(2, 1024, "RoPE pairs element i with i + head_dim/2",
                       "layers x heads x head_dim must fit an int"));
  v.field("rope_base", c.rope_base, "RoPE theta", greater_than(0));
  v.field("norm_eps", c.norm_eps, "RMSNorm epsilon",
          fp32_positive_at_most(1,
                                "an epsilon above 1 outweighs the mean square of the activations, so every "
                                "norm's output and the model's logits are about 0; published models use 1e-6 or "
                                "1e-5"));
  v.field("tie_embeddings", c.tie_embeddings, "the LM head reuses the embedding matrix");
  v.field("init_std", c.init_std, "std of the normal weight init",
          fp32_positive_at_most(1, "published models use 0.006 to 0.02; at 10 the first forward pass overflows"));
  v.field("scale_output_init", c.scale_output_init, "o_proj/down_proj start at init_std / sqrt(2 * layers)");
  v.field("max_position_embeddings", c.max_position_embeddings,
          "context length in the checkpoints' config.json (run.init_from's value when it has one)", at_least(1));
}

template <class V>
void visit(ParallelConfig& c, V& v) {
  v.field("tp", c.tp, "tensor-parallel ranks; dp = world / tp", at_least(1));
}

template <class V>
void visit(CompensatorConfig& c, V& v) {
  v.field("enabled", c.enabled, "apply error feedback at the echo sites");
  v.field("eta", c.eta, "compensation strength; 0 = per-call quantization only", in_closed(0, 1));
  v.field("a", c.a, "weight of m1 against m2", in_closed(0, 1));
  v.field("beta1", c.beta1, "decay of m1", fp32_decay());
  v.field("beta2", c.beta2, "decay of m2", fp32_decay());
}

template <class V>
void visit(CommConfig& c, V& v) {
  v.field("allreduce", c.allreduce,
          "exact (16-bit bf16 wire, fp32 sum) | exact_fp32 | echo (quantized, Echo) | two_collective (echo's "
          "arithmetic over two collectives, unpipelined: the baseline)");
  v.field("transport", c.transport,
          "mpi | shm | cuda_ipc | auto: how the all-reduce bytes travel (auto: shm when the TP group is on one node)");
  v.field("peer_timeout_s", c.peer_timeout_s,
          "seconds a wait for a peer lasts before it is an error naming it: a shm wait, an MPI collective of a "
          "training step, or an NCCL call this GPU has reached (a watchdog then ends the job)",
          greater_than(0));
  v.field("save_timeout_s", c.save_timeout_s,
          "seconds an MPI collective of start-up, a resume or a checkpoint save may wait for a peer before a watchdog "
          "ends the job naming it: generous, since a healthy peer may be busy there far longer than in a step (rank 0 "
          "writing a large checkpoint)",
          greater_than(0));
  v.field("shm_threads", c.shm_threads,
          "shm: threads per rank in the pipeline, each serving its own tile slots (more than one pays only when "
          "cores outnumber ranks)",
          between(1, 64, "'comm.p2p_tiles' is at most 64 and the threads split a round's tiles"));
  v.field("p2p_tiles", c.p2p_tiles,
          "shm, cuda_ipc: tiles per segment in one round of the pipeline; a workspace holds 2 x p2p_tiles x tp slots",
          between(1, 64, "more tiles in flight than this only grow the workspace"));
  v.field("p2p_slot_kib", c.p2p_slot_kib,
          "shm, cuda_ipc: KiB of one encoded tile's slot (a tile is as many whole groups as fit; a codec group "
          "larger than a slot goes over mpi)",
          between(1, 65536, "a slot of more than 64 MiB would make a workspace of gigabytes"));
  v.field("bits", c.bits, "4 | 8: bits per code", one_of({4, 8}));
  v.field("group_size", c.group_size, "values per quantization group, a power of two", power_of_two(2, 1 << 20));
  v.field("quantizer", c.quantizer, "symmetric | asym_naive | asym_zero_aware");
  v.section("compensator", c.compensator, "error feedback: c = eta * (a * m1 + (1 - a) * m2)");
  v.field("forward", c.forward, "quantize the forward sites");
  v.field("backward", c.backward, "quantize the backward sites");
  v.field("backward_rescale", c.backward_rescale, "power-of-two rescale before quantizing backward sites");
  v.field("early_site_8bit", c.early_site_8bit, "sites of the first half of the layers use 8 bits");
  v.field("telemetry_interval", c.telemetry_interval, "steps between per-site error logs; 0 = off", at_least(0));
  v.field("embedding_exact", c.embedding_exact, "embedding and LM-head all-reduces stay exact");
}

template <class V>
void visit(LinearConfig& c, V& v) {
  v.field("mode", c.mode, "bf16 | int8: arithmetic of the linear layers (bf16 runs in fp32 on the CPU backend)");
  v.field("backward_rounding", c.backward_rounding, "rtne | sr_independent | s3r: int8 gradient rounding");
  v.field("thresholds", c.thresholds, "per_token | per_example | independent: S3R threshold sharing");
  v.field("ec", c.ec, "none | dx_only | two_way: S3R structured error correction");
  v.field("projections", c.projections, "block projections in int8: any of q,k,v,o,gate,up,down", non_empty());
}

template <class V>
void visit(OptimConfig& c, V& v) {
  v.field("lr", c.lr, "peak learning rate", fp32_positive());
  v.field("min_lr", c.min_lr, "learning rate at the end of the decay, <= lr", at_least(0));
  v.field("beta1", c.beta1, "AdamW first-moment decay", fp32_decay());
  v.field("beta2", c.beta2, "AdamW second-moment decay", fp32_decay());
  v.field("eps", c.eps, "AdamW epsilon",
          fp32_positive_at_most(1,
                                "an epsilon above 1 outweighs sqrt(v) of every gradient below 1, so the "
                                "updates shrink to nothing; published values are 1e-8 to 1e-15"));
  v.field("weight_decay", c.weight_decay,
          "decoupled weight decay (the matrices except the embedding; an untied LM head decays)", at_least(0));
  v.field("grad_clip", c.grad_clip, "clip of the global gradient norm; 0 = off", fp32_off_or_positive());
}

template <class V>
void visit(ScheduleConfig& c, V& v) {
  v.field("warmup_steps", c.warmup_steps, "linear warmup from 0 to lr", at_least(0));
  v.field("decay", c.decay, "cosine | linear | constant: lr to min_lr after warmup");
}

template <class V>
void visit(DataConfig& c, V& v) {
  v.field("train", c.train, "indexed dataset prefix (.bin + .idx) to train on; relative to the working directory",
          non_empty());
  v.field("valid", c.valid, "indexed dataset prefix to evaluate on; relative to the working directory");
  v.field("seq_len", c.seq_len, "tokens per sequence", between(1, 1 << 20, "far above any training context"));
  v.field("eos_id", c.eos_id, "end-of-document token packed between documents (Qwen3 <|endoftext|>)", at_least(0));
}

template <class V>
void visit(TrainConfig& c, V& v) {
  v.field("steps", c.steps, "optimizer steps", at_least(1));
  v.field("micro_batch", c.micro_batch, "sequences per rank per forward/backward",
          between(1, 1 << 16, "micro_batch x dp must fit an int"));
  v.field("global_batch", c.global_batch, "sequences per step; a multiple of micro_batch x dp",
          between(1, 1 << 24, "far above any published batch"));
  v.field("eval_interval", c.eval_interval, "steps between evaluations; 0 = never", at_least(0));
  v.field("eval_batches", c.eval_batches, "global batches per evaluation: the same validation sequences at every tp/dp",
          at_least(1));
  v.field("checkpoint_interval", c.checkpoint_interval, "steps between checkpoints; 0 = never", at_least(0));
  v.field("keep_checkpoints", c.keep_checkpoints, "most recent checkpoints kept on disk", at_least(1));
  v.field("log_interval", c.log_interval, "steps between progress lines in the log (metrics.jsonl has every step)",
          at_least(1));
}

template <class V>
void visit(Config& c, V& v) {
  v.section("run", c.run, "seed, backend, output directory");
  v.section("model", c.model, "Qwen3 shape (defaults: Qwen3-0.6B)");
  v.section("parallel", c.parallel, "tensor parallelism");
  v.section("comm", c.comm, "tensor-parallel all-reduce (Echo)");
  v.section("linear", c.linear, "linear-layer arithmetic (S3R-EC)");
  v.section("optim", c.optim, "AdamW");
  v.section("schedule", c.schedule, "learning-rate schedule");
  v.section("data", c.data, "datasets");
  v.section("train", c.train, "loop lengths and batch sizes");
}

// ---- key listing ----------------------------------------------------------------------------

// The keys (fields and sub-sections) directly inside S, in table order.
struct KeyLister {
  std::vector<std::string> keys;
  template <class T>
  void field(const char* key, T&, const char*, const Check& = {}) {
    keys.emplace_back(key);
  }
  template <class S>
  void section(const char* key, S&, const char*) {
    keys.emplace_back(key);
  }
};

template <class S>
std::vector<std::string> keys_of() {
  S unused;
  KeyLister lister;
  visit(unused, lister);
  return lister.keys;
}

}  // namespace echo::config::schema
