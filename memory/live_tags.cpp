#include "memory/live_tags.h"

#include <algorithm>

namespace frugal::memory {
namespace {

// Trackers alive, newest last. Guarded by registry_mu().
std::vector<LiveTags*>& registry() {
  static std::vector<LiveTags*> r;
  return r;
}
std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}

// One word per category: category_name() explains, a tag must stay short.
const char* short_name(Category c) {
  switch (c) {
    case Category::resident:
      return "resident";
    case Category::forward:
      return "forward";
    case Category::backward:
      return "backward";
    case Category::optimizer:
      return "optimizer";
    case Category::workspace:
      return "workspace";
  }
  return "?";
}

}  // namespace

std::string live_tag_name(const AllocationEvent& e) {
  const std::string& name = tag_name(e);
  return (name.empty() ? name : name + " ") + "(" + short_name(e.category()) + ")";
}

LiveTags::LiveTags(Device device) : device_(device) {
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    registry().push_back(this);
  }
  add_allocation_observer(this);
}

LiveTags::~LiveTags() {
  remove_allocation_observer(this);
  std::lock_guard<std::mutex> lock(registry_mu());
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), this), r.end());
}

const LiveTags* LiveTags::for_device(Device device) {
  std::lock_guard<std::mutex> lock(registry_mu());
  const auto& r = registry();
  for (auto it = r.rbegin(); it != r.rend(); ++it) {
    if ((*it)->device_ == device) return *it;
  }
  return nullptr;
}

void LiveTags::on_event(const AllocationEvent& e) {
  if (e.device != device_ || e.id == 0 || !(e.is_alloc() || e.is_free())) return;
  const auto bytes = static_cast<int64_t>(e.bytes);
  if (e.is_alloc()) {
    std::string tag = live_tag_name(e);  // outside the lock: it allocates host memory
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_tag_.try_emplace(std::move(tag)).first;
    it->second.tag = it->first;
    it->second.bytes += bytes;
    it->second.count += 1;
    live_[e.id] = {bytes, &it->first};
    live_bytes_ += bytes;
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(e.id);
  if (it == live_.end()) return;  // made before this tracker
  Entry& entry = by_tag_.at(*it->second.tag);
  entry.bytes -= it->second.bytes;
  entry.count -= 1;
  live_bytes_ -= it->second.bytes;
  live_.erase(it);
}

std::vector<LiveTags::Entry> LiveTags::largest(size_t n) const {
  std::vector<Entry> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [tag, entry] : by_tag_) {
      if (entry.count > 0) out.push_back(entry);
    }
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.tag < b.tag;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

std::map<std::string, int64_t> LiveTags::bytes_by_tag() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> out;
  for (const auto& [tag, entry] : by_tag_) {
    if (entry.count > 0) out[tag] = entry.bytes;
  }
  return out;
}

int64_t LiveTags::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_;
}

}  // namespace frugal::memory
