// Interned allocation tags (Note [Allocation events] in memory/events.h): one record per
// distinct (op, module path, category, phase), so that a DataPtr and an observer keep a pointer.
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "memory/events.h"

namespace frugal::memory {
namespace {

AllocationTag make_tag(const char* op, bool backward, std::shared_ptr<const std::string> module,
                       Category category, Phase phase) {
  AllocationTag t;
  if (op != nullptr) t.op = std::string(op) + (backward ? " backward" : "");
  t.module = std::move(module);
  t.category = category;
  t.phase = phase;
  if (t.module && !t.module->empty()) t.name = *t.module;
  if (!t.op.empty()) t.name += (t.name.empty() ? "" : "/") + t.op;
  return t;
}

// Every record ever made, by a key that spells its fields. Never destroyed: tags are read by
// DataPtrs that static tensors may release at exit.
const AllocationTag* intern(AllocationTag t) {
  static auto* mu = new std::mutex;
  static auto* table = new std::unordered_map<std::string, const AllocationTag*>;
  std::string key = t.op;
  key += '\0';
  if (t.module) key += *t.module;
  key += '\0';
  key += static_cast<char>('0' + static_cast<int>(t.category));
  key += static_cast<char>('0' + static_cast<int>(t.phase));
  std::lock_guard<std::mutex> lock(*mu);
  auto [it, inserted] = table->emplace(std::move(key), nullptr);
  if (inserted) it->second = new AllocationTag(std::move(t));
  return it->second;
}

// The last tag this thread looked up, and the scopes it came from: consecutive allocations of an
// op under one module mostly hit it. The op is compared by text too, since a backward op's name
// lives in a buffer the engine reuses for the next node.
struct LastTag {
  const char* op = nullptr;
  bool backward = false;
  std::shared_ptr<const std::string> module;  // held, so the pointer cannot be reused
  Category category = Category::resident;
  Phase phase = Phase::outside;
  const AllocationTag* tag = nullptr;
  std::string op_text;
};
thread_local LastTag t_last;

}  // namespace

const AllocationTag* current_tag() {
  const char* op = current_op();
  const bool backward = current_op_is_backward();
  const std::shared_ptr<const std::string>& module = current_module_path();
  const Category category = current_category();
  const Phase phase = current_phase();
  LastTag& last = t_last;
  if (last.tag != nullptr && last.op == op && last.backward == backward && last.module == module &&
      last.category == category && last.phase == phase &&
      (op == nullptr || std::strcmp(op, last.op_text.c_str()) == 0)) {
    return last.tag;
  }
  last.tag = intern(make_tag(op, backward, module, category, phase));
  last.op = op;
  last.op_text = op != nullptr ? op : "";
  last.backward = backward;
  last.module = module;
  last.category = category;
  last.phase = phase;
  return last.tag;
}

const AllocationTag* untagged() {
  static const AllocationTag* t = intern(AllocationTag{});
  return t;
}

}  // namespace frugal::memory
