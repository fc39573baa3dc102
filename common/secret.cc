#include "common/secret.h"

#include <errno.h>  // program_invocation_short_name
#include <sys/prctl.h>

#include <cstdlib>
#include <cstring>

namespace pcrfs {

std::string_view ProgramName() { return program_invocation_short_name; }

void KeepSecretsOutOfCoreDumps(std::string_view program) {
  if (program != "pcrfs" && program != "pcr") return;
  const char* keep = std::getenv("PCRFS_CORE_DUMPS");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

}  // namespace pcrfs
