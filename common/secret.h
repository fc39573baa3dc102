// Secrets in memory: wiped when they are freed, and kept out of core dumps while held.
#pragma once

#include <string.h>  // explicit_bzero

#include <string>

namespace pcrfs {

// Zeroes every byte s owns (its whole capacity: a short string's inline buffer too) and empties
// it. explicit_bzero: the compiler may not drop the writes to memory about to be freed.
inline void WipeString(std::string& s) {
  explicit_bzero(s.data(), s.capacity());
  s.clear();
}

// Called when the process comes to hold a credential (a key, a token, a signed URL's query):
// it stops being dumpable (prctl PR_SET_DUMPABLE 0: no core dump, no ptrace attach by the same
// user; /proc/PID files become root's). PCRFS_CORE_DUMPS=1 in the environment keeps it dumpable,
// for debugging a crash with a core dump. Idempotent.
void KeepSecretsOutOfCoreDumps();

}  // namespace pcrfs
