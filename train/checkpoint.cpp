// Model and checkpoint files: PyTorch names and layouts at the file boundary, every check before
// the first copy so a bad file changes nothing.
#include "train/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "base/half.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/ops.h"

namespace frugal::train {

namespace {

constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kScalerPrefix = "scaler.";
constexpr const char* kStatePrefix = "frugal.";

// out[perm-ordered] for a 4-D tensor, element type U of the tensor's size. to_oihw: src is
// [K, kh, kw, C] and out [K, C, kh, kw]; otherwise the reverse.
template <typename U>
void permute_4d(const U* src, U* dst, const std::vector<int64_t>& d, bool to_oihw) {
  const int64_t k_n = d[0];
  // Name the extents by the OHWI view so one loop serves both directions.
  const int64_t h_n = to_oihw ? d[1] : d[2], w_n = to_oihw ? d[2] : d[3];
  const int64_t c_n = to_oihw ? d[3] : d[1];
  for (int64_t k = 0; k < k_n; ++k)
    for (int64_t c = 0; c < c_n; ++c)
      for (int64_t i = 0; i < h_n; ++i)
        for (int64_t j = 0; j < w_n; ++j) {
          const int64_t ohwi = ((k * h_n + i) * w_n + j) * c_n + c;
          const int64_t oihw = ((k * c_n + c) * h_n + i) * w_n + j;
          if (to_oihw)
            dst[oihw] = src[ohwi];
          else
            dst[ohwi] = src[oihw];
        }
}

Tensor convert_4d(const Tensor& t, bool to_oihw) {
  Tensor src = t.detach().to(Device::cpu());
  const auto& d = src.shape().dims();
  Shape out_shape = to_oihw ? Shape{d[0], d[3], d[1], d[2]} : Shape{d[0], d[2], d[3], d[1]};
  Tensor out = Tensor::empty(out_shape, {.dtype = src.dtype()});
  if (src.numel() == 0) return out;
  switch (dtype_size(src.dtype())) {
    case 1:
      permute_4d(static_cast<const uint8_t*>(src.data_ptr()), static_cast<uint8_t*>(out.data_ptr()),
                 d, to_oihw);
      break;
    case 2:
      permute_4d(static_cast<const uint16_t*>(src.data_ptr()),
                 static_cast<uint16_t*>(out.data_ptr()), d, to_oihw);
      break;
    case 4:
      permute_4d(static_cast<const uint32_t*>(src.data_ptr()),
                 static_cast<uint32_t*>(out.data_ptr()), d, to_oihw);
      break;
    case 8:
      permute_4d(static_cast<const uint64_t*>(src.data_ptr()),
                 static_cast<uint64_t*>(out.data_ptr()), d, to_oihw);
      break;
    default:
      FRUGAL_FAIL("checkpoint layout: unexpected element size of ", src.dtype());
  }
  return out;
}

NamedTensors convert_all(const NamedTensors& tensors, bool to_oihw) {
  NamedTensors out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    out.emplace_back(name, t.ndim() == 4 ? convert_4d(t, to_oihw) : t);
  }
  return out;
}

// Every name, tied weights' second names too, as torch's state_dict has them.
NamedTensors model_tensors(const nn::Module& model) {
  NamedTensors all = model.named_parameters(/*remove_duplicate=*/false);
  for (auto& b : model.named_buffers(/*remove_duplicate=*/false)) all.push_back(std::move(b));
  return all;
}

std::string describe_entry(const Tensor& t) {
  return detail::str(t.shape(), " ", safetensors_dtype_name(t.dtype()));
}

// The index of the first NaN or infinity in a CPU tensor and its value, or -1 (integer tensors
// have none). The generic reader (load_safetensors) keeps such values, as torch's does: a file may
// hold them on purpose. Loading them into a model or an optimizer is refused, since a NaN weight
// or moment turns every later step into NaN without saying where it came from.
int64_t first_non_finite(const Tensor& t, double* value) {
  const int64_t n = t.numel();
  auto scan = [&](auto to_double) -> int64_t {
    for (int64_t i = 0; i < n; ++i) {
      const double v = to_double(i);
      if (!std::isfinite(v)) {
        *value = v;
        return i;
      }
    }
    return -1;
  };
  switch (t.dtype()) {
    case DType::f32:
      return scan([p = static_cast<const float*>(t.data_ptr())](int64_t i) { return p[i]; });
    case DType::f64:
      return scan([p = static_cast<const double*>(t.data_ptr())](int64_t i) { return p[i]; });
    case DType::f16:
      return scan([p = static_cast<const uint16_t*>(t.data_ptr())](int64_t i) {
        return static_cast<double>(f16_to_float(p[i]));
      });
    case DType::bf16:
      return scan([p = static_cast<const uint16_t*>(t.data_ptr())](int64_t i) {
        return static_cast<double>(bf16_to_float(p[i]));
      });
    case DType::i64:
    case DType::u8:
      return -1;
  }
  return -1;
}

// Adds a line to `problems` when the CPU tensor `t` holds a NaN or infinity.
void note_non_finite(const std::string& name, const Tensor& t, std::vector<std::string>& problems) {
  double v = 0;
  if (int64_t i = first_non_finite(t, &v); i >= 0) {
    problems.push_back(
        detail::str("tensor '", name, "' holds ", v, " at element ", i, " of ", t.numel()));
  }
}

// One line per tensor of `tensors` (names prefixed with `prefix`) that holds a NaN or infinity.
void list_non_finite(const NamedTensors& tensors, const std::string& prefix,
                     std::vector<std::string>& problems) {
  for (const auto& [name, t] : tensors) note_non_finite(prefix + name, t, problems);
}

bool ends_with_num_batches_tracked(const std::string& name) {
  static const std::string kSuffix = "num_batches_tracked";
  return name.size() >= kSuffix.size() &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

// The copies a model load will make, computed and checked before any of them runs.
struct ModelLoad {
  std::vector<std::pair<Tensor, Tensor>> copies;  // (model tensor, file tensor in frugal layout)
};

// file_raw holds the file's tensors as stored (OIHW); every problem is listed in one message.
ModelLoad plan_model_load(const char* op, const std::string& path, const nn::Module& model,
                          const NamedTensors& file_raw) {
  std::map<std::string, const Tensor*> raw_by_name;
  for (const auto& [name, t] : file_raw) raw_by_name[name] = &t;
  NamedTensors file = from_file_layout(file_raw);
  std::map<std::string, Tensor> by_name(file.begin(), file.end());

  ModelLoad plan;
  std::vector<std::string> problems;
  std::set<std::string> used;
  for (const auto& [name, dst] : model_tensors(model)) {
    if (!dst.defined()) continue;
    auto it = by_name.find(name);
    if (it == by_name.end() && ends_with_num_batches_tracked(name)) {
      // torchvision's older weight files (ResNet-18's among them) predate the counter, and
      // BatchNorm's _load_from_state_dict starts a missing one at 0: so does this load.
      plan.copies.emplace_back(dst, zeros(dst.shape(), {.dtype = dst.dtype()}));
      continue;
    }
    if (it == by_name.end()) {
      problems.push_back(
          detail::str("missing tensor '", name, "' (expected ", describe_entry(dst), ")"));
      continue;
    }
    used.insert(name);
    const Tensor& src = it->second;
    if (src.dtype() != dst.dtype()) {
      problems.push_back(detail::str("tensor '", name, "' has dtype ",
                                     safetensors_dtype_name(src.dtype()), ", expected ",
                                     safetensors_dtype_name(dst.dtype())));
    } else if (src.shape() != dst.shape()) {
      std::string as_stored =
          src.ndim() == 4 ? detail::str(" (", raw_by_name[name]->shape(), " OIHW in the file)")
                          : "";
      problems.push_back(detail::str("tensor '", name, "' has shape ", src.shape(), as_stored,
                                     ", expected ", dst.shape()));
    } else {
      plan.copies.emplace_back(dst, src);
    }
  }
  list_non_finite(file_raw, "", problems);
  for (const auto& [name, t] : file) {
    if (!used.count(name)) {
      problems.push_back(detail::str("unexpected tensor '", name, "' (", describe_entry(t),
                                     ") that the model does not have"));
    }
  }
  if (!problems.empty()) {
    // The first ones say what is wrong; hundreds (another model's file) only bury it.
    constexpr size_t kListed = 20;
    std::string all;
    for (size_t i = 0; i < std::min(problems.size(), kListed); ++i) all += "\n  " + problems[i];
    if (problems.size() > kListed) {
      all += detail::str("\n  ... and ", problems.size() - kListed, " more (", problems.size(),
                         " problems in all: is it another model's or another width's file?)");
    }
    FRUGAL_FAIL(op, ": '", path, "' cannot be loaded into the ", model.type_name(),
                " (nothing was loaded):", all);
  }
  // The file's tensors go to the model's devices now, before anything is changed: a copy that
  // runs out of device memory then leaves the model, optimizer and scaler as they were, and the
  // copies that change the model allocate nothing.
  for (auto& [dst, src] : plan.copies) {
    if (src.device() != dst.device()) src = src.to(dst.device());
  }
  return plan;
}

void apply_model_load(const ModelLoad& plan) {
  autograd::NoGradGuard no_grad;  // writes into parameters: no history (torch.no_grad())
  for (const auto& [dst, src] : plan.copies) copy_(dst, src);
}

std::string format_u64(uint64_t v) { return std::to_string(v); }

// Parses a whole decimal field of the checkpoint's metadata; names file and key when it is not.
template <typename T>
T parse_field(const std::string& path, const Metadata& md, const std::string& key) {
  auto it = md.find(key);
  FRUGAL_CHECK(it != md.end(), "load_checkpoint: '", path, "': __metadata__ has no '", key,
               "' (not a frugal checkpoint?)");
  const std::string& s = it->second;
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  FRUGAL_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), "load_checkpoint: '",
               path, "': __metadata__ '", key, "' = '", s, "' is not an integer");
  return v;
}

}  // namespace

NamedTensors to_file_layout(const NamedTensors& tensors) { return convert_all(tensors, true); }
NamedTensors from_file_layout(const NamedTensors& tensors) { return convert_all(tensors, false); }

void save_model(const std::string& path, const nn::Module& model, const Metadata& metadata) {
  save_safetensors(path, to_file_layout(model_tensors(model)), metadata);
}

void load_model(const std::string& path, nn::Module& model) {
  SafetensorsFile file = load_safetensors(path);
  ModelLoad plan = plan_model_load("load_model", path, model, file.tensors);
  apply_model_load(plan);
}

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* opt,
                     const TrainingState& state, const optim::GradScaler* scaler) {
  NamedTensors all = model_tensors(model);
  for (const auto& [name, t] : all) {
    for (const char* prefix : {kOptimizerPrefix, kScalerPrefix}) {
      FRUGAL_CHECK(name.rfind(prefix, 0) != 0, "save_checkpoint: model tensor '", name,
                   "' would be read back as optimizer or scaler state (the '", prefix,
                   "' prefix is reserved)");
    }
  }
  Metadata md;
  for (const auto& [k, v] : state.extra) {
    FRUGAL_CHECK(k.rfind(kStatePrefix, 0) != 0, "save_checkpoint: extra metadata key '", k,
                 "' uses the reserved prefix '", kStatePrefix, "'");
    md[k] = v;
  }
  md["frugal.format"] = "checkpoint";
  md["frugal.epoch"] = std::to_string(state.epoch);
  md["frugal.step"] = std::to_string(state.step);
  md["frugal.seed"] = format_u64(state.seed);
  md["frugal.rng_offset"] = format_u64(state.rng_offset);
  if (opt != nullptr) {
    md["frugal.optimizer"] = opt->name();
    for (const auto& [name, t] : opt->state_dict()) all.emplace_back(kOptimizerPrefix + name, t);
  }
  if (scaler != nullptr) {
    for (const auto& [name, t] : scaler->state_dict()) all.emplace_back(kScalerPrefix + name, t);
  }
  // A checkpoint that load_checkpoint would refuse is not written: a run that diverged would
  // otherwise replace its last good file with one that no resume can read. The previous file
  // stays. The host copies checked are the ones written (save_safetensors copies nothing that
  // is already on the host): one copy a tensor, all of them held until the file is written.
  NamedTensors file = to_file_layout(all);
  std::vector<std::string> non_finite;
  for (auto& [name, t] : file) {
    t = t.detach().to(Device::cpu());
    note_non_finite(name, t, non_finite);
  }
  if (!non_finite.empty()) {
    std::string lines;
    for (const auto& p : non_finite) lines += "\n  " + p;
    FRUGAL_FAIL("save_checkpoint: '", path, "' was not written (a file there is kept): the ",
                "state holds values that are not finite, which load_checkpoint would refuse; ",
                "the run has diverged:", lines);
  }
  save_safetensors(path, file, md);
}

TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* opt,
                              optim::GradScaler* scaler) {
  SafetensorsFile file = load_safetensors(path);
  const Metadata& md = file.metadata;
  auto format = md.find("frugal.format");
  FRUGAL_CHECK(format != md.end() && format->second == "checkpoint", "load_checkpoint: '", path,
               "' is not a frugal checkpoint (__metadata__ 'frugal.format' is not 'checkpoint'); ",
               "use load_model for weights-only files");
  TrainingState state;
  state.epoch = parse_field<int64_t>(path, md, "frugal.epoch");
  state.step = parse_field<int64_t>(path, md, "frugal.step");
  state.seed = parse_field<uint64_t>(path, md, "frugal.seed");
  state.rng_offset = parse_field<uint64_t>(path, md, "frugal.rng_offset");
  FRUGAL_CHECK(state.epoch >= 0 && state.step >= 0, "load_checkpoint: '", path,
               "': __metadata__ says epoch ", state.epoch, " and step ", state.step,
               "; a saved run cannot have done fewer than 0 of either");
  if (auto it = md.find("frugal.optimizer"); it != md.end()) state.optimizer = it->second;
  for (const auto& [k, v] : md) {
    if (k.rfind(kStatePrefix, 0) != 0) state.extra[k] = v;
  }

  NamedTensors model_part, opt_part, scaler_part;
  const size_t plen = std::strlen(kOptimizerPrefix), slen = std::strlen(kScalerPrefix);
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(kOptimizerPrefix, 0) == 0)
      opt_part.emplace_back(name.substr(plen), t);
    else if (name.rfind(kScalerPrefix, 0) == 0)
      scaler_part.emplace_back(name.substr(slen), t);
    else
      model_part.emplace_back(name, t);
  }
  state.scaler_saved = !scaler_part.empty();
  // 1. The model part, checked only (its values finite too); the optimizer and scaler parts'
  // values finite; the scaler part, checked by loading a scratch scaler.
  ModelLoad plan = plan_model_load("load_checkpoint", path, model, model_part);
  std::vector<std::string> non_finite;
  if (opt != nullptr) list_non_finite(opt_part, kOptimizerPrefix, non_finite);
  if (scaler != nullptr) list_non_finite(scaler_part, kScalerPrefix, non_finite);
  if (!non_finite.empty()) {
    std::string all;
    for (const auto& p : non_finite) all += "\n  " + p;
    FRUGAL_FAIL("load_checkpoint: '", path,
                "' holds values that are not finite (nothing was loaded):", all);
  }
  const bool load_scaler = scaler != nullptr && !scaler_part.empty();
  if (load_scaler) {
    try {
      optim::GradScaler probe(scaler->options());
      probe.load_state_dict(scaler_part);
    } catch (const OutOfMemoryError&) {
      throw;
    } catch (const Error& e) {
      FRUGAL_FAIL("load_checkpoint: '", path,
                  "': scaler part rejected (nothing was loaded): ", e.what());
    }
  }
  // 2. The optimizer, all-or-nothing by its own contract; a failure here has changed nothing.
  if (opt != nullptr) {
    FRUGAL_CHECK(!state.optimizer.empty(), "load_checkpoint: '", path,
                 "' holds no optimizer state, but a ", opt->name(), " optimizer was given");
    FRUGAL_CHECK(state.optimizer == opt->name(), "load_checkpoint: '", path, "' holds ",
                 state.optimizer, " optimizer state, but a ", opt->name(), " optimizer was given");
    try {
      opt->load_state_dict(from_file_layout(opt_part));
    } catch (const OutOfMemoryError& e) {  // stays out of memory: the caller may free some
      throw OutOfMemoryError(detail::str("load_checkpoint: '", path,
                                         "': optimizer part (nothing was loaded): ", e.what()));
    } catch (const Error& e) {
      FRUGAL_FAIL("load_checkpoint: '", path,
                  "': optimizer part rejected (nothing was loaded): ", e.what());
    }
  }
  // 3. The scaler (already validated), then the model copies, which cannot fail on shapes or
  // dtypes any more.
  if (load_scaler) scaler->load_state_dict(scaler_part);
  apply_model_load(plan);
  return state;
}

}  // namespace frugal::train
