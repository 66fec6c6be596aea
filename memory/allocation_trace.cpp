// Recording allocation events and writing them as Chrome trace-event JSON (allocation_trace.h).
#include "memory/allocation_trace.h"

#include <cstdio>
#include <fstream>
#include <ostream>

#include "base/error.h"

namespace frugal::memory {
namespace {

constexpr int kPid = 1;  // one process: the device

// A JSON string literal: quotes, backslashes and control characters escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Microseconds, the format's unit, from nanoseconds.
std::string micros(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  return buf;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"0x%llx\"", static_cast<unsigned long long>(v));
  return buf;
}

std::string slice_name(const AllocationTag* t) { return t->name.empty() ? "untagged" : t->name; }

std::string tag_args(const AllocationTag* t) {
  return "\"op\":" + quoted(t->op) + ",\"module\":" + quoted(t->module ? *t->module : "") +
         ",\"category\":" + quoted(category_name(t->category)) +
         ",\"phase\":" + quoted(phase_name(t->phase));
}

}  // namespace

AllocationTrace::AllocationTrace(Device device, size_t max_events, const Allocator* allocator)
    : device_(device), max_events_(max_events), start_(std::chrono::steady_clock::now()) {
  const MemoryStats s = (allocator != nullptr ? *allocator : allocator_for(device)).stats();
  allocated_start_ = allocated_ = s.requested_bytes.current;
  reserved_start_ = reserved_ = s.reserved_bytes.current;
  add_allocation_observer(this);
}

AllocationTrace::~AllocationTrace() { stop(); }

void AllocationTrace::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!observing_) return;
    observing_ = false;
  }
  remove_allocation_observer(this);
}

uint32_t AllocationTrace::thread_index() {
  auto [it, inserted] = threads_.emplace(std::this_thread::get_id(), 0);
  if (inserted) it->second = static_cast<uint32_t>(threads_.size());
  return it->second;
}

void AllocationTrace::on_event(const AllocationEvent& e) {
  if (e.device != device_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!observing_) return;
  const auto n = static_cast<int64_t>(e.bytes);
  bool paired = false;
  switch (e.kind) {  // the counters stay exact whether or not the event is kept
    case EventKind::alloc:
      allocated_ += n;
      break;
    case EventKind::free:
      allocated_ -= n;
      paired = e.id != 0 && open_.erase(e.id) > 0;
      break;
    case EventKind::segment_map:
      reserved_ += n;
      break;
    case EventKind::segment_unmap:
      reserved_ -= n;
      break;
    case EventKind::oom:
      break;
  }
  if (records_.size() >= max_events_ && !paired) {
    dropped_++;
    return;
  }
  if (e.kind == EventKind::alloc) open_.insert(e.id);
  Record r;
  r.ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start_)
             .count();
  r.kind = e.kind;
  r.thread = thread_index();
  r.bytes = e.bytes;
  r.id = e.id;
  r.tag = e.tag != nullptr ? e.tag : untagged();
  r.address = e.address;
  r.allocated = allocated_;
  r.reserved = reserved_;
  r.paired = paired;
  records_.push_back(r);
}

void AllocationTrace::write_json(const std::string& path) const {
  std::ofstream f(path);
  FRUGAL_CHECK(f.good(), "AllocationTrace: cannot open ", path, " for writing");
  write_json(f);
  f.flush();
  FRUGAL_CHECK(f.good(), "AllocationTrace: writing ", path, " failed");
}

void AllocationTrace::write_json(std::ostream& os) const {
  std::lock_guard<std::mutex> lock(mu_);
  const bool reserved_track = device_.is_cuda();  // the CPU and meta reserve what they allocate
  const std::string pid = ",\"pid\":" + std::to_string(kPid);
  bool first = true;
  auto event = [&](const std::string& body) {
    os << (first ? "\n" : ",\n") << '{' << body << '}';
    first = false;
  };
  auto counter = [&](const char* name, int64_t ns, int64_t bytes) {
    event("\"ph\":\"C\",\"name\":\"" + std::string(name) + "\",\"ts\":" + micros(ns) + pid +
          ",\"tid\":0,\"args\":{\"bytes\":" + std::to_string(bytes) + "}");
  };

  os << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"device\":" << quoted(device_.str())
     << ",\"recorded_events\":" << records_.size() << ",\"dropped_events\":" << dropped_
     << ",\"max_events\":" << max_events_ << "},\"traceEvents\":[";
  event("\"ph\":\"M\",\"name\":\"process_name\"" + pid +
        ",\"tid\":0,\"args\":{\"name\":" + quoted("frugal memory " + device_.str()) + "}");
  counter("allocated", 0, allocated_start_);
  if (reserved_track) counter("reserved", 0, reserved_start_);

  std::unordered_map<uint64_t, const Record*> live;  // recorded allocations without a release
  int64_t last_ns = 0;
  for (const Record& r : records_) {
    last_ns = r.ns;
    const std::string common =
        ",\"ts\":" + micros(r.ns) + pid + ",\"tid\":" + std::to_string(r.thread);
    switch (r.kind) {
      case EventKind::alloc:
        live.emplace(r.id, &r);
        event("\"ph\":\"b\",\"cat\":\"alloc\",\"name\":" + quoted(slice_name(r.tag)) +
              ",\"id\":" + hex(r.id) + common + ",\"args\":{\"bytes\":" + std::to_string(r.bytes) +
              "," + tag_args(r.tag) + "}");
        counter("allocated", r.ns, r.allocated);
        break;
      case EventKind::free:
        if (r.paired) {
          live.erase(r.id);
          event("\"ph\":\"e\",\"cat\":\"alloc\",\"name\":" + quoted(slice_name(r.tag)) +
                ",\"id\":" + hex(r.id) + common);
        }
        counter("allocated", r.ns, r.allocated);
        break;
      case EventKind::segment_map:
      case EventKind::segment_unmap:
        event("\"ph\":\"i\",\"s\":\"p\",\"name\":" + quoted(event_kind_name(r.kind)) + common +
              ",\"args\":{\"bytes\":" + std::to_string(r.bytes) + ",\"address\":" + hex(r.address) +
              "," + tag_args(r.tag) + "}");
        if (reserved_track) counter("reserved", r.ns, r.reserved);
        break;
      case EventKind::oom:
        event("\"ph\":\"i\",\"s\":\"g\",\"name\":" + quoted(event_kind_name(r.kind)) + common +
              ",\"args\":{\"bytes\":" + std::to_string(r.bytes) +
              ",\"allocated\":" + std::to_string(r.allocated) +
              ",\"reserved\":" + std::to_string(r.reserved) + "," + tag_args(r.tag) + "}");
        break;
    }
  }
  // Slices still open end where the recording does; the counters end at their exact values,
  // which differ from the last sample when events were dropped.
  for (const Record& r : records_) {
    if (r.kind != EventKind::alloc || live.count(r.id) == 0) continue;
    event("\"ph\":\"e\",\"cat\":\"alloc\",\"name\":" + quoted(slice_name(r.tag)) +
          ",\"id\":" + hex(r.id) + ",\"ts\":" + micros(last_ns) + pid +
          ",\"tid\":" + std::to_string(r.thread) + ",\"args\":{\"live_at_end\":true}");
  }
  counter("allocated", last_ns, allocated_);
  if (reserved_track) counter("reserved", last_ns, reserved_);
  os << "\n]}\n";
}

size_t AllocationTrace::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

size_t AllocationTrace::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

int64_t AllocationTrace::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

int64_t AllocationTrace::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

}  // namespace frugal::memory
