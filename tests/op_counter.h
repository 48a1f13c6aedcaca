// Counting one op's calls (by its dispatcher name, e.g. "aten::linear") on every thread while a counter lives, for
// tests that check how often a mechanism runs an op (a checkpoint's recompute, a kept attention's forward).
#pragma once
#include <ATen/record_function.h>

#include <atomic>
#include <cstring>

namespace vdt::test {

class OpCounter {
 public:
  explicit OpCounter(const char* op) {
    calls_ = 0, op_ = op;
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          if (std::strcmp(fn.name(), op_) == 0) ++calls_;
          return nullptr;
        }).scopes({at::RecordScope::FUNCTION}));
  }
  ~OpCounter() { at::removeCallback(handle_); }
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;
  int64_t calls() const { return calls_; }

 private:
  static inline std::atomic<int64_t> calls_{0};  // one counter at a time (the callback takes no state)
  static inline const char* op_ = nullptr;
  at::CallbackHandle handle_;
};

}  // namespace vdt::test
