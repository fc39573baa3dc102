// A 5x7 bitmap font, drawn for pcrfs, for the captions of `pcr ladder`: ASCII letters, digits,
// space and . , : % / ( ) - _ + = ?. Any other byte is drawn as '?'. Each glyph cell is 6x9
// (one column and two rows of spacing), multiplied by an integer scale.
#pragma once

#include <string_view>

#include "mount-tools/raster.h"

namespace pcrfs::tools {

inline constexpr int kGlyphAdvance = 6;  // per unit of scale
inline constexpr int kLineHeight = 9;    // per unit of scale

// Width in pixels of text drawn at `scale`.
int TextWidth(std::string_view text, int scale);

// Draws text with its top-left corner at (x, y); pixels at or right of clip_x, or outside the
// image, are not drawn.
void DrawText(RgbImage* image, int x, int y, std::string_view text, int scale, Rgb color,
              int clip_x);

}  // namespace pcrfs::tools
