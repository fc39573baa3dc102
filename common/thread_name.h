// Names the calling thread (at most 15 characters), as `top -H`, `ps -L` and perf show it:
// the daemon's threads are then told apart by what they do (pcrfs-push, pcrfs-spec, ...).
#pragma once

#include <pthread.h>

namespace pcrfs {

inline void NameThisThread(const char* name) { ::pthread_setname_np(::pthread_self(), name); }

}  // namespace pcrfs
