// What the process knows about itself from /proc/self: the one place that reads and parses
// those files (statm, io, maps), as LevelDB's Env keeps the operating system behind one class.
// Every function is thread-safe and cheap enough for an inline check every few calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace pcrfs::proc {

// Resident file-backed and shared memory in bytes (/proc/self/statm "shared"): the executable,
// libraries and whatever of a memory-mapped file (the index) is mapped. 0 if unknown.
uint64_t ResidentFileBytes();

// Bytes this process caused to be read from storage (/proc/self/io read_bytes); nullopt if the
// file cannot be read (no CONFIG_TASK_IO_ACCOUNTING, or a restricted /proc).
std::optional<uint64_t> StorageReadBytes();

// Resident memory in bytes, anonymous and file-backed (/proc/self/statm "resident"), what
// top's RES shows. 0 if unknown.
uint64_t ResidentBytes();

// The mapping (from /proc/self/maps) that holds address p.
struct Mapping {
  void* start = nullptr;
  size_t size = 0;
};
std::optional<Mapping> MappingOf(const void* p);

}  // namespace pcrfs::proc
