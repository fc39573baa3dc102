// jpeglib.h and jerror.h, after the standard headers that jpeglib.h needs (size_t, FILE) but
// does not include itself. Include this instead of <jpeglib.h>.
#pragma once

// clang-format off
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
