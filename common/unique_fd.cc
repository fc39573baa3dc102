#include "common/unique_fd.h"

#include <unistd.h>

namespace pcrfs {

void UniqueFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace pcrfs
