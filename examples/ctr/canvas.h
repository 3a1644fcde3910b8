// Canvas: a tiny RGB rasterizer for plots: rectangles, straight (optionally
// dashed) lines and text in a built-in 5x7 bitmap font (digits, capital
// letters, some punctuation; lower case is drawn as upper case).
//
// Coordinates are pixels, (0, 0) top left; drawing outside the canvas is
// clipped. Thread-compatible.
#ifndef EXAMPLES_CTR_CANVAS_H_
#define EXAMPLES_CTR_CANVAS_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace ctr {

struct Rgb {
  uint8_t r = 0;
  uint8_t g = 0;
  uint8_t b = 0;
  bool operator==(const Rgb& o) const {
    return r == o.r && g == o.g && b == o.b;
  }
  bool operator!=(const Rgb& o) const { return !(*this == o); }
};

class Canvas {
 public:
  static constexpr int kGlyphWidth = 5;
  static constexpr int kGlyphHeight = 7;

  // CHECKs that width and height are in [1, 2^14].
  Canvas(int width, int height, Rgb background);

  int width() const { return width_; }
  int height() const { return height_; }
  // Rows top to bottom, 3 bytes per pixel: EncodePng's input.
  const std::string& rgb() const { return rgb_; }

  // The pixel at (x, y), which must be on the canvas (CHECKed).
  Rgb Pixel(int x, int y) const;
  void SetPixel(int x, int y, Rgb colour);

  // Fills [x0, x1) x [y0, y1).
  void FillRect(int x0, int y0, int x1, int y1, Rgb colour);
  // A line from (x0, y0) to (x1, y1), both ends included, `thickness`
  // pixels wide.
  void DrawLine(int x0, int y0, int x1, int y1, Rgb colour, int thickness = 1);
  // The same line drawn as `dash` pixels on, `gap` pixels off.
  void DrawDashedLine(int x0, int y0, int x1, int y1, Rgb colour, int dash,
                      int gap, int thickness = 1);
  // `text` with its top left corner at (x, y), each font pixel drawn as a
  // scale x scale square. Characters without a glyph are drawn as '?'.
  void DrawText(int x, int y, std::string_view text, Rgb colour, int scale = 1);
  // The width in pixels DrawText uses: 6 * scale per character, less the
  // last character's spacing.
  static int TextWidth(std::string_view text, int scale = 1);

 private:
  template <typename Plot>
  static void Bresenham(int x0, int y0, int x1, int y1, Plot plot);
  void Stamp(int x, int y, Rgb colour, int thickness);

  // Immutable after construction.
  const int width_;
  const int height_;

  std::string rgb_;
};

}  // namespace ctr

#endif  // EXAMPLES_CTR_CANVAS_H_
