// The memory summary table (torch.cuda.memory_summary's layout and units, so that the numbers
// read the same way) and the per-device views of memory/views.h.
#include "memory/views.h"

#include <cstdio>
#include <iterator>
#include <string>

#include "memory/allocator.h"

namespace frugal::memory {

namespace {

constexpr size_t kLineWidth = 77;  // "| metric | cur | peak | alloc | freed |": 21 + 4 cells of 10

// PyTorch's _format_size: whole units, moving up one only while the value is at least 768 of
// that unit, so "2048 KiB" rather than "2 MiB"; exact for the allocator's round sizes.
std::string format_bytes(int64_t bytes) {
  static const char* kUnits[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  for (; unit + 1 < std::size(kUnits) && bytes >= 768 * 1024; unit++) bytes /= 1024;
  char cell[32];
  std::snprintf(cell, sizeof cell, "%6lld %s", static_cast<long long>(bytes), kUnits[unit]);
  return cell;
}

// PyTorch's _format_count: thousands (K, M) once a count reaches 750000.
std::string format_count(int64_t count) {
  static const char* kUnits[] = {" ", "K", "M"};
  size_t unit = 0;
  for (; unit + 1 < std::size(kUnits) && count >= 750 * 1000; unit++) count /= 1000;
  char cell[32];
  std::snprintf(cell, sizeof cell, "%7lld %s ", static_cast<long long>(count), kUnits[unit]);
  return cell;
}

std::string trimmed(const std::string& cell) {
  const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
  return a == std::string::npos ? std::string() : cell.substr(a, b - a + 1);
}

std::string row(const char* metric, const Stat& s, std::string (*format)(int64_t)) {
  char line[160];
  std::snprintf(line, sizeof line, "| %-21s | %s | %s | %s | %s |\n", metric,
                format(s.current).c_str(), format(s.peak).c_str(), format(s.allocated).c_str(),
                format(s.freed).c_str());
  return line;
}

// "|" + `text` padded to the table's width + "|", built by appending (GCC 12 warns falsely of
// overlapping copies on "|" + std::string(...)).
std::string framed(const std::string& text, char fill = ' ') {
  const size_t inner = kLineWidth - 2;
  const size_t pad = inner > text.size() ? inner - text.size() : 0;
  std::string line(1, '|');
  line.append(pad / 2, fill).append(text).append(pad - pad / 2, fill).append("|\n");
  return line;
}

}  // namespace

std::string MemoryStats::summary(const std::string& title) const {
  const std::string rule = framed("", '='), thin = framed("", '-');
  std::string out = rule + framed(title) + thin;
  out += framed("alloc retries: " + std::to_string(num_alloc_retries) +
                "    OOMs: " + std::to_string(num_ooms) + "    reserved but unallocated: " +
                trimmed(format_bytes(reserved_bytes.current - allocated_bytes.current)));
  out += rule;
  char head[160];
  std::snprintf(head, sizeof head, "| %-21s | %-10s | %-10s | %-10s | %-10s |\n", "Metric",
                "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
  out += head + thin;
  out += row("Allocated memory", allocated_bytes, format_bytes);
  out += row("Requested memory", requested_bytes, format_bytes);
  out += row("Reserved memory", reserved_bytes, format_bytes);
  out += row("Active memory", active_bytes, format_bytes);
  out += row("Inactive split memory", inactive_split_bytes, format_bytes);
  out += thin;
  out += row("Allocations", allocation, format_count);
  out += row("Segments", segment, format_count);
  out += rule;
  out.pop_back();  // callers add their own newline, as with a one-line message
  return out;
}

std::string summary(Device device) {
  return allocator_for(device).stats().summary("memory summary, " + device.str());
}

void reset_peak_stats(Device device) { allocator_for(device).reset_peak_stats(); }

int64_t empty_cache(Device device) { return allocator_for(device).empty_cache(); }

}  // namespace frugal::memory
