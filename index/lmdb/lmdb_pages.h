// A reader of LMDB files that never hands them to liblmdb: it reads the pages itself and checks
// every page number, offset and size before it uses it (docs/format.md, "Reading format 3
// safely"), so that an index.lmdb from an untrusted store can be converted without trusting it.
// Internal to pcrfs_index.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "common/status.h"

namespace pcrfs::index {

// Calls fn(key, value) for every record of the named database `db` of an LMDB file held in memory,
// in key order, reading its pages itself with bounds checks (never liblmdb): any malformed page,
// cycle, depth over a bound, out-of-range page number or offset, overflow page chain outside the
// file, or a database that does not exist is Corruption (a one-line message saying what is wrong).
// Stops and returns fn's status if fn returns non-OK.
//
// `file` is the LMDB image, with or without the pcrfs trailer after it (index_trailer.h): only
// whole pages are read, the image is a whole number of pages and the 32-byte trailer is never
// one, so the trailer is ignored and NOT checked (its CRC is the caller's business,
// CheckIndexFile or IndexTrailer::DecodeFrom). Only the 64-bit little-endian layout of LMDB 0.9
// is read, and only what pcrfs writes: plain databases (no MDB_DUPSORT, MDB_INTEGERKEY, ...);
// anything else is Corruption saying so. Messages name the database and page, not the file: the
// caller prefixes its path. Keys are strictly increasing (checked); key and value
// views point into `file` and stay valid as long as it does. Every page is read at most once per
// call and the tree depth is at most 32, so the work is linear in the file's size.
Status ForEachLmdbRecord(
    std::span<const uint8_t> file, std::string_view db,
    const std::function<Status(std::string_view key, std::string_view value)>& fn);

}  // namespace pcrfs::index
