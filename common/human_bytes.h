// Byte counts as people read them, in binary units: what pcr's reports and the daemon's sizing
// line print.
#pragma once

#include <cstdint>
#include <string>

namespace pcrfs {

// "730 B", "1.5 MiB", "4.2 GiB": one decimal from KiB up, at most TiB.
std::string HumanBytes(uint64_t bytes);

}  // namespace pcrfs
