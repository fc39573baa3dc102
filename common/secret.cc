#include "common/secret.h"

#include <sys/prctl.h>

#include <cstdlib>
#include <cstring>

namespace pcrfs {

void KeepSecretsOutOfCoreDumps() {
  const char* keep = std::getenv("PCRFS_CORE_DUMPS");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

}  // namespace pcrfs
