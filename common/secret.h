// Secrets in memory: wiped when they are freed, and kept out of core dumps while held.
#pragma once

#include <string.h>  // explicit_bzero

#include <string>
#include <string_view>

namespace pcrfs {

// Zeroes every byte s owns (its whole capacity: a short string's inline buffer too) and empties
// it. explicit_bzero: the compiler may not drop the writes to memory about to be freed.
inline void WipeString(std::string& s) {
  explicit_bzero(s.data(), s.capacity());
  s.clear();
}

// The running program's short name (argv[0]'s last component).
std::string_view ProgramName();

// Called when the process comes to hold a credential (a key, a token, a signed URL's query):
// pcrfs and pcr (`program`, the running program's name) stop being dumpable (prctl
// PR_SET_DUMPABLE 0: no core dump, no ptrace attach by the same user; /proc/PID files become
// root's). Another program that embeds the library (the Python module inside a training
// script) is left as it is: its dumpability is its own business. PCRFS_CORE_DUMPS=1 in the
// environment keeps pcrfs and pcr dumpable, for debugging a crash with a core dump. Idempotent.
void KeepSecretsOutOfCoreDumps(std::string_view program = ProgramName());

}  // namespace pcrfs
