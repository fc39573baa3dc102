#include "codec/jpeg_dest.h"

#include <cstdlib>

namespace pcrfs::codec {
namespace {

MallocDestination* Dest(j_compress_ptr cinfo) {
  return reinterpret_cast<MallocDestination*>(cinfo->dest);
}

void InitDestination(j_compress_ptr cinfo) {
  MallocDestination* dest = Dest(cinfo);
  if (dest->buffer == nullptr) {
    dest->buffer = static_cast<unsigned char*>(std::malloc(dest->capacity));
    if (dest->buffer == nullptr) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 100);
  }
  dest->size = 0;
  dest->pub.next_output_byte = dest->buffer;
  dest->pub.free_in_buffer = dest->capacity;
}

boolean EmptyOutputBuffer(j_compress_ptr cinfo) {
  // libjpeg calls this only when the buffer is full.
  MallocDestination* dest = Dest(cinfo);
  size_t new_capacity = dest->capacity * 2;
  if (new_capacity < dest->capacity) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 101);
  auto* grown = static_cast<unsigned char*>(std::realloc(dest->buffer, new_capacity));
  if (grown == nullptr) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 102);
  dest->buffer = grown;
  dest->pub.next_output_byte = grown + dest->capacity;
  dest->pub.free_in_buffer = new_capacity - dest->capacity;
  dest->capacity = new_capacity;
  return TRUE;
}

void TermDestination(j_compress_ptr cinfo) {
  MallocDestination* dest = Dest(cinfo);
  dest->size = dest->capacity - dest->pub.free_in_buffer;
}

}  // namespace

void InstallMallocDestination(j_compress_ptr cinfo, MallocDestination* dest,
                              size_t initial_capacity) {
  dest->pub.init_destination = InitDestination;
  dest->pub.empty_output_buffer = EmptyOutputBuffer;
  dest->pub.term_destination = TermDestination;
  dest->pub.next_output_byte = nullptr;
  dest->pub.free_in_buffer = 0;
  dest->capacity = initial_capacity < 4096 ? 4096 : initial_capacity;
  dest->size = 0;
  cinfo->dest = &dest->pub;
}

}  // namespace pcrfs::codec
