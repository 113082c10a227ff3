#include "fuse/long_wait.h"

namespace tessera::fuse {

namespace {
thread_local const LongWaitHooks* t_hooks = nullptr;
}  // namespace

void SetLongWaitHooks(const LongWaitHooks* hooks) { t_hooks = hooks; }

LongWait::LongWait(bool waits) {
  if (!waits || t_hooks == nullptr || t_hooks->begin == nullptr) return;
  hooks_ = t_hooks;
  hooks_->begin(hooks_->arg);
}

LongWait::~LongWait() {
  if (hooks_ != nullptr && hooks_->end != nullptr) hooks_->end(hooks_->arg);
}

}  // namespace tessera::fuse
