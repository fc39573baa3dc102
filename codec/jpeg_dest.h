// A libjpeg destination manager writing into one malloc'd, doubling buffer that the caller owns
// at every moment, so a longjmp out of jpeg_write_* never leaks it (libjpeg's jpeg_mem_dest keeps
// its current buffer private until jpeg_finish_compress).
#pragma once

#include <cstddef>

#include "codec/libjpeg.h"

namespace pcrfs::codec {

struct MallocDestination {
  jpeg_destination_mgr pub;  // first, so that cinfo->dest is also a MallocDestination*
  unsigned char* buffer;     // malloc'd; the caller frees it with std::free, also after errors
  size_t capacity;
  size_t size;  // bytes written, valid after jpeg_finish_compress
};

// Installs `dest` on cinfo with an initial capacity (at least 4096 bytes is used). Growth that
// fails ends in ERREXIT(JERR_OUT_OF_MEMORY). REQUIRES: dest->buffer starts out null.
void InstallMallocDestination(j_compress_ptr cinfo, MallocDestination* dest,
                              size_t initial_capacity);

}  // namespace pcrfs::codec
