// JPEG encoding through the system libjpeg(-turbo).
#ifndef LA_LIBJPEG_ENCODE_H
#define LA_LIBJPEG_ENCODE_H

#include <stddef.h>

#include "decode.h" // LA_JPEG_OK, LA_JPEG_ERROR, la_jpeg_info (its message fields)

// la_jpeg_encode_opts are the encoder's settings.
typedef struct {
	int quality;     // 1..100, libjpeg's scale (jpeg_set_quality, baseline tables)
	int subsample;   // 0: 4:4:4 (chroma at full resolution), 1: 4:2:0
	int optimize;    // optimised Huffman tables (a second pass over the coefficients)
	int progressive; // libjpeg's simple progression script
} la_jpeg_encode_opts;

// la_jpeg_encode compresses width x height pixels, rows stride bytes apart, of
// bytes_per_pixel bytes each: 3 is RGB, 4 is RGBX (the fourth byte ignored). On
// LA_JPEG_OK *out is a malloc'd buffer of *out_size bytes that the caller frees; on
// failure nothing is left allocated and info's msg_code and msg say why.
int la_jpeg_encode(const unsigned char *pix, size_t stride, int width, int height,
                   int bytes_per_pixel, const la_jpeg_encode_opts *opts,
                   unsigned char **out, size_t *out_size, la_jpeg_info *info);

#endif
