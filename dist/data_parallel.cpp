// Note [Data parallelism] in data_parallel.h.
#include "dist/data_parallel.h"

#include <algorithm>

#include "base/error.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"

namespace frugal::dist {

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                           DataParallelOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  FRUGAL_CHECK(module_ != nullptr && group_ != nullptr, "DataParallel: null module or group");
  FRUGAL_CHECK(options_.reduce_dtype == DType::f32 || is_low_precision(options_.reduce_dtype),
               "DataParallel: reduce_dtype must be f32, f16 or bf16, got ", options_.reduce_dtype);
  register_module("", module_);  // names stay the module's: checkpoints load with or without
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : module_->named_parameters()) {
    FRUGAL_CHECK(t.device() == group_->device(), "DataParallel: parameter '", name, "' is on ",
                 t.device(), " but the ", group_->backend(), " group works on ", group_->device(),
                 "; move the model before wrapping it");
    Tensor p = t;
    group_->broadcast(p, 0);
    p.bump_version();
    if (!t.requires_grad()) continue;
    params_.push_back(t);
    names_.push_back(name);
  }
  broadcast_buffers();
  std::vector<BucketParam> planned;
  for (const Tensor& p : params_) {
    planned.push_back({static_cast<size_t>(p.numel()), options_.reduce_dtype});
  }
  buckets_ = plan_buckets(planned, options_.bucket_cap_bytes, options_.first_bucket_cap_bytes);
  bucket_of_.resize(params_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t i : buckets_[b].params) bucket_of_[i] = b;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(autograd::add_post_accumulate_grad_hook(
        params_[i], [this, i](const Tensor&) { on_gradient(i); }));
  }
  reset_backward_state();
}

DataParallel::~DataParallel() = default;

void DataParallel::reset_backward_state() {
  ready_.assign(params_.size(), false);
  in_flight_.clear();
  in_flight_.resize(buckets_.size());
  missing_.clear();
  for (const Bucket& b : buckets_) missing_.push_back(b.params.size());
  next_start_ = 0;
  finish_queued_ = false;
  overlap_ = {};
}

Tensor DataParallel::forward(const Tensor& x) {
  // A backward that failed part-way (out of memory, retried smaller) left its counts behind.
  if (is_training() && autograd::grad_enabled()) reset_backward_state();
  if (options_.broadcast_buffers && group_->size() > 1) broadcast_buffers();
  return (*module_)(x);
}

void DataParallel::broadcast_buffers() {
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : module_->named_buffers()) {
    Tensor b = t;
    group_->broadcast(b, 0);
    b.bump_version();  // written in place: what saved them must see the change
  }
}

void DataParallel::on_gradient(size_t i) {
  if (!sync_) return;  // no_sync(): the gradient stays local and accumulates
  FRUGAL_CHECK(!ready_[i], "DataParallel: parameter '", names_[i], "' received a second gradient ",
               "in one backward after its bucket was counted (is it reached both inside and ",
               "outside a checkpointed segment?); its ranks would average an incomplete gradient");
  ready_[i] = true;
  if (!finish_queued_) {
    autograd::queue_callback([this] { finish_backward(); });
    finish_queued_ = true;
  }
  if (--missing_[bucket_of_[i]] == 0) start_complete_buckets();
}

void DataParallel::start_complete_buckets() {
  while (next_start_ < buckets_.size() && missing_[next_start_] == 0) {
    start_bucket(next_start_++);
    ++overlap_.during_backward;
  }
}

void DataParallel::start_bucket(size_t b) {
  autograd::NoGradGuard no_grad;
  const Bucket& bucket = buckets_[b];
  const DType wire = options_.reduce_dtype;
  const Device device = group_->device();
  InFlight& f = in_flight_[b];
  std::vector<Tensor> parts;
  parts.reserve(bucket.params.size() + 1);
  std::vector<double> used;
  for (size_t i : bucket.params) {
    Tensor g = params_[i].grad();
    const int64_t n = params_[i].numel();
    parts.push_back(g.defined() ? reshape(g.dtype() == wire ? g : cast(g, wire), {n})
                                : zeros({n}, {.dtype = wire, .device = device}));
    used.push_back(g.defined() ? 1.0 : 0.0);
  }
  // Note [Globally unused parameters]: one flag a parameter travels behind the gradients.
  const bool all_used = std::find(used.begin(), used.end(), 0.0) == used.end();
  const int64_t flags = static_cast<int64_t>(used.size());
  parts.push_back(all_used ? full({flags}, 1.0, {.dtype = wire, .device = device})
                           : from_vector(used, {flags}, {.dtype = wire}).to(device));
  f.flat = cat(parts, 0);
  f.used_here = std::move(used);
  f.work = group_->all_reduce_async(f.flat, ReduceOp::avg);
  ++buckets_reduced_;
}

void DataParallel::finish_backward() {
  for (; next_start_ < buckets_.size(); ++next_start_) {  // in order, as during backward
    start_bucket(next_start_);
    ++overlap_.at_end;
  }
  autograd::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    InFlight& f = in_flight_[b];
    f.work->wait();
    const std::vector<size_t>& members = buckets_[b].params;
    const int64_t flags = static_cast<int64_t>(members.size());
    const int64_t grads = f.flat.numel() - flags;
    // A rank that gave every parameter of the bucket a gradient knows they are all used; only a
    // rank that lacks one reads the averaged flags (one small copy to the host, that rank alone;
    // a dry run on meta has no values and counts every parameter used).
    std::vector<double> used_anywhere = f.used_here;
    if (std::find(used_anywhere.begin(), used_anywhere.end(), 0.0) != used_anywhere.end()) {
      used_anywhere = group_->device().is_meta() ? std::vector<double>(members.size(), 1.0)
                                                 : narrow(f.flat, 0, grads, flags).to_vector();
    }
    int64_t offset = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      const Tensor& p = params_[members[k]];
      if (used_anywhere[k] > 0.0) {
        Tensor g = reshape(narrow(f.flat, 0, offset, p.numel()), p.shape());
        params_[members[k]].set_grad(g.dtype() == p.dtype() ? g : cast(g, p.dtype()));
      }
      offset += p.numel();
    }
    f = {};  // the bucket's buffer goes back now, not at the end of the loop
  }
  last_overlap_ = overlap_;
  reset_backward_state();
}

bool DataParallel::replicas_agree() {
  // FNV-1a over the parameters' bytes. Buffers are left out: with local BatchNorm each rank's
  // running statistics follow its own last batch until the next forward broadcasts rank 0's.
  uint64_t hash = 1469598103934665603ull;
  for (auto& [name, t] : module_->named_parameters()) {
    Tensor host = t.device().is_cpu() ? t : t.detach().to(Device::cpu());
    const auto* p = static_cast<const unsigned char*>(host.data_ptr());
    for (size_t i = 0; i < host.nbytes(); ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  }
  // Three 20-bit pieces (exact even where the group reduces in f32), their maximum and minimum
  // across ranks: all ranks agree exactly when both equal this rank's.
  std::vector<double> v;
  for (int k = 0; k < 3; ++k) v.push_back(static_cast<double>((hash >> (20 * k)) & 0xfffff));
  for (int k = 0; k < 3; ++k) v.push_back(-v[static_cast<size_t>(k)]);
  std::vector<double> m = all_reduce_values(*group_, v, ReduceOp::max);
  bool agree = true;
  for (size_t k = 0; k < 3; ++k) agree = agree && m[k] == v[k] && m[k + 3] == v[k + 3];
  return all_reduce_values(*group_, {agree ? 0.0 : 1.0}, ReduceOp::max)[0] == 0.0;
}

void agree_on_overflow(optim::GradScaler& scaler, std::shared_ptr<ProcessGroup> group) {
  FRUGAL_CHECK(group != nullptr, "agree_on_overflow: null group");
  if (group->size() == 1) {
    scaler.set_found_inf_agreement(nullptr);
    return;
  }
  scaler.set_found_inf_agreement(
      [group](Tensor& found_inf) { group->all_reduce(found_inf, ReduceOp::max); });
}

}  // namespace frugal::dist
