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
    case Category::conv_workspace:
      return "conv_workspace";
  }
  return "?";
}

}  // namespace

std::string live_tag_name(const AllocationTag& tag) {
  return (tag.name.empty() ? tag.name : tag.name + " ") + "(" + short_name(tag.category) + ")";
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

bool LiveTags::largest_on(Device device, size_t n, std::vector<Entry>* out) {
  std::lock_guard<std::mutex> lock(registry_mu());
  const auto& r = registry();
  for (auto it = r.rbegin(); it != r.rend(); ++it) {
    if ((*it)->device_ != device) continue;
    *out = (*it)->largest(n);
    return true;
  }
  return false;
}

// Two hash-map updates an event, no strings: tags are interned, so their pointers are the keys,
// and names are made only when someone asks.
void LiveTags::on_event(const AllocationEvent& e) {
  if (e.device != device_ || e.id == 0 || e.tag == nullptr || !(e.is_alloc() || e.is_free())) {
    return;
  }
  const auto bytes = static_cast<int64_t>(e.bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (e.is_alloc()) {
    Counts& c = by_tag_[e.tag];
    c.bytes += bytes;
    c.count += 1;
    live_[e.id] = {bytes, e.tag};
    live_bytes_ += bytes;
    return;
  }
  auto it = live_.find(e.id);
  if (it == live_.end()) return;  // made before this tracker
  Counts& c = by_tag_[it->second.tag];
  c.bytes -= it->second.bytes;
  c.count -= 1;
  live_bytes_ -= it->second.bytes;
  live_.erase(it);
}

std::map<std::string, LiveTags::Entry> LiveTags::by_name() const {
  std::map<std::string, Entry> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [tag, c] : by_tag_) {
    if (c.count == 0) continue;
    Entry& e = out[live_tag_name(*tag)];  // tags of different phases may share a name
    e.bytes += c.bytes;
    e.count += c.count;
  }
  for (auto& [name, e] : out) e.tag = name;
  return out;
}

std::vector<LiveTags::Entry> LiveTags::largest(size_t n) const {
  std::vector<Entry> out;
  for (auto& [name, e] : by_name()) out.push_back(std::move(e));
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.tag < b.tag;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

std::map<std::string, int64_t> LiveTags::bytes_by_tag() const {
  std::map<std::string, int64_t> out;
  for (const auto& [name, e] : by_name()) out[name] = e.bytes;
  return out;
}

int64_t LiveTags::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_;
}

}  // namespace frugal::memory
